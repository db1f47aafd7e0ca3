//! What one run measures: sections, implementations, rounds and windows.

use std::time::Duration;

use clap::ValueEnum;
use redlock_bench::workload::Window;

use crate::Args;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Section {
    Uncontended,
    Contended,
    Server,
    Memory,
    Slow,
    Reclaim,
    Waiting,
    Cluster,
    Fenced,
    Sentinel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Impl {
    Client,
    Hand,
    Floor,
}

impl Impl {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Impl::Client => "redlock-client",
            Impl::Hand => "hand-written Redlock",
            Impl::Floor => "PING floor",
        }
    }
}

#[derive(Clone)]
pub(crate) struct Plan {
    pub(crate) smoke: bool,
    pub(crate) rounds: usize,
    pub(crate) window: Window,
    pub(crate) memory_names: u64,
    pub(crate) memory_rounds: usize,
    pub(crate) sections: Vec<Section>,
    pub(crate) impls: Vec<Impl>,
}

impl Plan {
    pub(crate) fn from(args: &Args) -> Self {
        let (rounds, secs, names, memory_rounds) = if args.smoke {
            (1, 0.1, 10_000, 1)
        } else {
            (5, 1.0, 1_000_000, 3)
        };
        let secs = args.secs.unwrap_or(secs);
        let all_sections = [
            Section::Uncontended,
            Section::Contended,
            Section::Server,
            Section::Memory,
            Section::Slow,
            Section::Reclaim,
            Section::Waiting,
            Section::Cluster,
            Section::Fenced,
            Section::Sentinel,
        ];
        Plan {
            smoke: args.smoke,
            rounds: args.rounds.unwrap_or(rounds).max(1),
            window: Window {
                warmup: Duration::from_secs_f64((secs * 0.2).min(0.2)),
                duration: Duration::from_secs_f64(secs),
            },
            memory_names: args.memory_names.unwrap_or(names).max(1),
            memory_rounds,
            sections: if args.only.is_empty() {
                all_sections.to_vec()
            } else {
                args.only.clone()
            },
            impls: if args.impls.is_empty() {
                vec![Impl::Client, Impl::Hand, Impl::Floor]
            } else {
                args.impls.clone()
            },
        }
    }

    pub(crate) fn runs(&self, s: Section) -> bool {
        self.sections.contains(&s)
    }

    pub(crate) fn has(&self, i: Impl) -> bool {
        self.impls.contains(&i)
    }
}
