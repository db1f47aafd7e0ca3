//! Adapter from the benchmark to `redlock-client`, with default options.

use std::time::Duration;

use redlock_client::{Lock, Redlock};

/// The project's client.
#[derive(Clone)]
pub struct ClientLocker {
    redlock: Redlock,
}

impl ClientLocker {
    /// Connects with the default options.
    pub async fn connect(urls: &[String]) -> Result<Self, String> {
        let redlock = Redlock::builder(urls.iter().cloned())
            .build()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self { redlock })
    }

    /// `acquire` (retries per the default policy).
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Lock, String> {
        self.redlock
            .acquire(key, ttl)
            .await
            .map_err(|e| e.to_string())
    }

    /// One attempt, `None` when busy.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lock>, String> {
        self.redlock
            .try_acquire(key, ttl)
            .await
            .map_err(|e| e.to_string())
    }

    /// Releases (returns once a quorum confirmed).
    pub async fn release(&self, lock: Lock) -> Result<(), String> {
        lock.release().await.map(drop).map_err(|e| e.to_string())
    }
}

impl ClientLocker {
    /// Connects to `members` (single nodes and clusters) with the default
    /// options.
    pub async fn connect_members(members: Vec<redlock_client::Member>) -> Result<Self, String> {
        let redlock = Redlock::builder(members)
            .build()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self { redlock })
    }
}
