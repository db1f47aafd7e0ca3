//! The floor of any quorum lock over N nodes: two parallel fan-outs (acquire,
//! release) of the cheapest command, PING, over the same kind of connections.

use futures_util::future::try_join_all;
use redis::aio::MultiplexedConnection;

/// One `MultiplexedConnection` per node.
#[derive(Clone)]
pub struct PingFloor {
    conns: Vec<MultiplexedConnection>,
}

impl PingFloor {
    /// Connects to every URL.
    pub async fn connect(urls: &[String]) -> redis::RedisResult<Self> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            conns.push(
                client
                    .get_multiplexed_async_connection_with_config(&crate::untimed_connection())
                    .await?,
            );
        }
        Ok(Self { conns })
    }

    /// PING every node in parallel and wait for every reply.
    pub async fn fan_out(&self) -> redis::RedisResult<()> {
        try_join_all(self.conns.iter().map(|con| {
            let mut con = con.clone();
            async move { redis::cmd("PING").query_async::<String>(&mut con).await }
        }))
        .await?;
        Ok(())
    }

    /// One lock-shaped cycle: two fan-outs.
    pub async fn cycle(&self) -> redis::RedisResult<()> {
        self.fan_out().await?;
        self.fan_out().await
    }
}
