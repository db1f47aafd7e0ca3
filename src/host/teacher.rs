//! The replica's side of [`crate::core::teacher`]: which master taught it
//! its longest lease, kept in `redlock-lease-learned-PORT` in the server's
//! directory (`teacher host:port acked-ms`), and the master it follows now.
//!
//! The master followed is read from `INFO replication` at load and at every
//! role change to replica: Redis fires `REPLICATION_ROLE_CHANGED` /
//! `NOW_REPLICA` at every `REPLICAOF host port`, also from one master to
//! another (`replicationSetMaster`; `REPLICAOF` to the master followed
//! already changes nothing and fires nothing).

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use redis_module::{Context, ContextFlags};

use crate::core::teacher::Taught;
use crate::host::{config, guard, mutant, sync};

/// File name of what the node learned from which master, followed by
/// `-PORT` ([`config::node_file`]). The unsuffixed file of earlier
/// versions held only the marker `1`, which teaches nothing
/// ([`Taught::parse`]): it is not read.
pub const FILE: &str = "redlock-lease-learned";

static TAUGHT: Mutex<Taught> = Mutex::new(Taught::new());
static FOLLOWING: Mutex<Option<String>> = Mutex::new(None);
static PATH: OnceLock<PathBuf> = OnceLock::new();

fn taught() -> std::sync::MutexGuard<'static, Taught> {
    TAUGHT.lock().unwrap_or_else(|p| p.into_inner())
}

fn following() -> std::sync::MutexGuard<'static, Option<String>> {
    FOLLOWING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The module loads (before the data): reads the file and the master
/// followed.
pub fn on_load(ctx: &Context) {
    let path = config::node_file(ctx, FILE);
    let text = std::fs::read_to_string(&path).ok();
    *taught() = Taught::parse(text.as_deref());
    let _ = PATH.set(path);
    *following() = if ctx.get_flags().contains(ContextFlags::SLAVE) {
        sync::configured_master()
    } else {
        None
    };
    // Loaded as a master: a life as master, which forgets the teacher as
    // a promotion does ([`Taught::became_master`]).
    if following().is_none() {
        let mut t = taught();
        if t.became_master(mutant::current()) {
            let copy = t.clone();
            drop(t);
            save(ctx, &copy);
        }
    }
}

/// Writes the file (fsynced) before the node goes on; removes it when
/// nothing is learned. A failure is logged: without the file a restart
/// counts as untaught, which guards longer, never shorter.
fn save(ctx: &Context, t: &Taught) {
    let Some(path) = PATH.get() else {
        return;
    };
    let text = t.render();
    let result = if text.is_empty() {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    } else {
        guard::write_file(path, &text)
    };
    if let Err(e) = result {
        ctx.log_warning(&format!("cannot write {}: {e}", path.display()));
    }
}

/// The node became a replica of the master configured now (a `REPLICAOF`,
/// Sentinel's reconfiguration): untaught until it applies a record of that
/// master, unless it is its teacher already.
pub fn on_replica_of(_ctx: &Context) {
    *following() = sync::configured_master();
}

/// The node was promoted: whether it was taught by the master it followed
/// until now, and the acknowledged length that master last announced (0
/// when not taught by it). It follows no master from now on, and forgets
/// its teacher ([`Taught::became_master`]: a teacher counts only for the
/// life of it this node followed).
pub fn on_promotion(ctx: &Context) -> (bool, u64) {
    let was = following().take();
    let mut t = taught();
    let m = mutant::current();
    let learned = (
        t.taught_by(was.as_deref(), m),
        t.acked_ms(was.as_deref(), m),
    );
    if t.became_master(m) {
        let copy = t.clone();
        drop(t);
        save(ctx, &copy);
    }
    learned
}

/// A node record was applied: from the master followed now (its stream, a
/// full sync: `from_master`), or from this node's own files.
pub fn record_applied(ctx: &Context, from_master: bool) {
    let mut t = taught();
    let changed = if from_master {
        match following().clone() {
            Some(master) => t.record_from(&master),
            // A record from a master while no master is known (INFO had
            // none): it teaches nothing that can be checked later.
            None => false,
        }
    } else {
        t.record_from_file(mutant::current())
    };
    if changed {
        let copy = t.clone();
        drop(t);
        save(ctx, &copy);
    }
}

/// A lease length was learned from a record (of the stream, a full sync or
/// a file): it teaches nothing of the master's longest lease (only a node
/// record does, [`record_applied`]); under the `taught-by-any` mutant it
/// counts, as in the rule before.
pub fn lease_applied(ctx: &Context) {
    let mut t = taught();
    if t.record_from_file(mutant::current()) {
        let copy = t.clone();
        drop(t);
        save(ctx, &copy);
    }
}

/// The master followed announced what its replicas acknowledged knowing of
/// its longest lease (`REDLOCK.APPLY … acked ms`).
pub fn acked_applied(ctx: &Context, acked_ms: u64) {
    let Some(master) = following().clone() else {
        return;
    };
    let mut t = taught();
    if t.acked_from(&master, acked_ms) {
        let copy = t.clone();
        drop(t);
        save(ctx, &copy);
    }
}

/// The acknowledged length of the master this replica follows now, as
/// its life would start promoted (`INFO redlock`: 0 until that master's
/// `acked` announcement reached it, right after it came online).
pub fn master_acked_now() -> u64 {
    let f = following().clone();
    taught().acked_ms(f.as_deref(), mutant::current())
}

/// Whether the node is taught by the master it follows now (`INFO
/// redlock`).
pub fn taught_now() -> bool {
    let f = following().clone();
    taught().taught_by(f.as_deref(), mutant::current())
}
