//! The trace of a run: every event taken off the queue goes into a hash
//! (BLAKE3), which proves that a replay played the same run; when asked,
//! the events are also kept as readable lines.

/// A run's trace.
pub struct Trace {
    hasher: blake3::Hasher,
    lines: Option<Vec<String>>,
}

impl Trace {
    /// A trace; `record` keeps readable lines too.
    pub fn new(record: bool) -> Trace {
        Trace {
            hasher: blake3::Hasher::new(),
            lines: record.then(Vec::new),
        }
    }

    /// Whether readable lines are kept.
    pub fn recording(&self) -> bool {
        self.lines.is_some()
    }

    /// An event at true time `t`.
    pub fn event(&mut self, t: u64, words: &[u64; 4]) {
        let mut bytes = [0u8; 40];
        bytes[..8].copy_from_slice(&t.to_le_bytes());
        for (i, w) in words.iter().enumerate() {
            bytes[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        self.hasher.update(&bytes);
    }

    /// A readable line.
    pub fn line(&mut self, line: String) {
        if let Some(lines) = self.lines.as_mut() {
            lines.push(line);
        }
    }

    /// The hash.
    pub fn finish(&self) -> [u8; 32] {
        *self.hasher.finalize().as_bytes()
    }

    /// The readable lines.
    pub fn take_lines(&mut self) -> Option<Vec<String>> {
        self.lines.take()
    }
}
