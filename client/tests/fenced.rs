//! Fenced writes from the client: `fenced`, `fenced_atomic` and `announce`
//! on a held lock, against a resource server (not one of the lock nodes)
//! and a resource cluster; `Error::Stale`; the CLI's `run --guard` and
//! `redlock fenced` (exit code 6 on STALE).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{client, five, urls};
use redis::AsyncCommands;
use redlock_client::Error;
use redlock_testkit::{Cluster, Node};

const TTL: Duration = Duration::from_secs(10);
const BIN: &str = env!("CARGO_BIN_EXE_redlock");

async fn resource_con(node: &Node) -> redis::aio::MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn set(key: &str, value: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_holder_makes_the_old_one_stale() {
    let nodes = five();
    let resource = Node::start();
    let redlock = client(&nodes).await;
    let mut con = resource_con(&resource).await;

    let a = redlock
        .acquire("job", Duration::from_millis(300))
        .await
        .unwrap();
    let reply: String = a
        .fenced(&mut con, "job:fence", &set("job:state", "a"))
        .await
        .unwrap();
    assert_eq!(reply, "OK");
    let built = a.fenced_cmd("job:fence", &set("k", "v")).unwrap();
    let args: Vec<Vec<u8>> = built
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => panic!("cursor"),
        })
        .collect();
    assert_eq!(
        args,
        [
            b"REDLOCK.FENCED".to_vec(),
            b"job:fence".to_vec(),
            b"job".to_vec(),
            a.token().to_string().into_bytes(),
            b"SET".to_vec(),
            b"k".to_vec(),
            b"v".to_vec()
        ]
    );
    tokio::time::sleep(Duration::from_millis(400)).await;

    // B takes over after A's lease ran out and shows its token first.
    let b = redlock.acquire("job", TTL).await.unwrap();
    assert!(b.token() > a.token());
    assert_eq!(b.announce(&mut con, "job:fence").await.unwrap(), b.token());
    let stale = a
        .fenced::<String>(&mut con, "job:fence", &set("job:state", "late"))
        .await
        .unwrap_err();
    match stale {
        Error::Stale {
            guard,
            token,
            highest,
        } => {
            assert_eq!(guard, "job:fence");
            assert_eq!(token, a.token());
            assert_eq!(highest, b.token());
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    let state: String = con.get("job:state").await.unwrap();
    assert_eq!(state, "a", "the stale write must not run");

    // Several commands in one MULTI/EXEC.
    let mut pipe = redis::pipe();
    pipe.cmd("INCR").arg("job:seq");
    pipe.cmd("HSET").arg("job:h").arg("v").arg("b");
    pipe.cmd("HINCRBY").arg("job:h").arg("ver").arg(1);
    let (seq, added, ver): (i64, i64, i64) =
        b.fenced_atomic(&mut con, "job:fence", &pipe).await.unwrap();
    assert_eq!((seq, added, ver), (1, 1, 1));
    let stale = a
        .fenced_atomic::<(i64, i64, i64)>(&mut con, "job:fence", &pipe)
        .await
        .unwrap_err();
    assert!(matches!(stale, Error::Stale { .. }), "{stale:?}");
    let seq: i64 = con.get("job:seq").await.unwrap();
    assert_eq!(seq, 1, "nothing of the stale transaction ran");

    // The inner command's own error: Error::Resource, no retry.
    let mut incr = redis::cmd("INCR");
    incr.arg("job:state");
    let e = b
        .fenced::<i64>(&mut con, "job:fence", &incr)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Resource(m) if m.contains("not an integer")),
        "{e:?}"
    );

    // A LockGuard has the same methods.
    let key_value = redlock
        .with_lock("other", TTL, |guard| async move {
            let mut con = resource_con(&resource).await;
            guard
                .fenced::<String>(&mut con, "other:fence", &set("other:state", "g"))
                .await
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(key_value, "OK");
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_atomic_on_a_resource_cluster() {
    let nodes = five();
    let cluster = Cluster::builder().shards(2).start();
    let redlock = client(&nodes).await;
    let mut con = redis::cluster::ClusterClient::new(cluster.seed_urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let lock = redlock.acquire("{acct:7}", TTL).await.unwrap();
    let mut pipe = redis::pipe();
    pipe.cmd("INCRBY").arg("{acct:7}:balance").arg(5);
    pipe.cmd("RPUSH").arg("{acct:7}:log").arg("deposit 5");
    let (balance, len): (i64, i64) = lock
        .fenced_atomic(&mut con, "{acct:7}:fence", &pipe)
        .await
        .unwrap();
    assert_eq!((balance, len), (5, 1));
    let balance: i64 = lock
        .fenced(
            &mut con,
            "{acct:7}:fence",
            redis::cmd("GET").arg("{acct:7}:balance"),
        )
        .await
        .unwrap();
    assert_eq!(balance, 5);
    lock.release().await.unwrap();
}

fn run_cli(envs: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDLOCK_GUARD")
        .env_remove("REDLOCK_RESOURCE")
        .env_remove("REDLOCK_KEY")
        .env_remove("REDLOCK_TOKEN");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn cli_run_announces_and_fenced_exits_6_on_stale() {
    let nodes = five();
    let resource = Node::start();
    let lock_nodes = urls(&nodes).join(",");
    let url = resource.url();
    // `run --guard` shows the token to the guard and exports it.
    let out = run_cli(
        &[("REDLOCK_NODES", &lock_nodes), ("REDLOCK_RESOURCE", &url)],
        &[
            "run",
            "backup",
            "--guard",
            "backup:fence",
            "--",
            "sh",
            "-c",
            &format!(
                "echo \"$REDLOCK_GUARD $REDLOCK_RESOURCE $REDLOCK_TOKEN\"; {BIN} fenced -- SET backup:last done"
            ),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    let first: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(&first[..2], ["backup:fence", url.as_str()]);
    let token: u64 = first[2].parse().unwrap();
    assert_eq!(lines.next(), Some("OK"));
    let mut con = resource.connection();
    let last: String = redis::cmd("GET")
        .arg("backup:last")
        .query(&mut con)
        .unwrap();
    assert_eq!(last, "done");
    let info: Vec<redis::Value> = redis::cmd("REDLOCK.GUARDINFO")
        .arg("backup:fence")
        .query(&mut con)
        .unwrap();
    assert_eq!(redis::from_redis_value_ref::<u64>(&info[3]).unwrap(), token);

    // An older token: `redlock fenced` exits 6, and nothing ran.
    let old = (token - 1).to_string();
    let env = [
        ("REDLOCK_RESOURCE", url.as_str()),
        ("REDLOCK_GUARD", "backup:fence"),
        ("REDLOCK_KEY", "backup"),
        ("REDLOCK_TOKEN", old.as_str()),
    ];
    let out = run_cli(&env, &["fenced", "--", "SET", "backup:last", "late"]);
    assert_eq!(out.status.code(), Some(6));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("STALE"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last: String = redis::cmd("GET")
        .arg("backup:last")
        .query(&mut con)
        .unwrap();
    assert_eq!(last, "done");
    // The documented shell line: redis-cli -e exits 1 on STALE.
    if let Ok(out) = Command::new("redis-cli")
        .args([
            "-e",
            "-u",
            &url,
            "REDLOCK.FENCED",
            "backup:fence",
            "backup",
            &old,
        ])
        .args(["SET", "backup:last", "late"])
        .output()
    {
        assert_eq!(out.status.code(), Some(1));
    }

    // Run with a stale guard: the command does not start, exit 6.
    let _: i64 = redis::cmd("REDLOCK.GUARD")
        .arg("backup:fence")
        .arg("backup")
        .arg(token + 1_000_000_000)
        .query(&mut con)
        .unwrap();
    let out = run_cli(
        &[("REDLOCK_NODES", &lock_nodes), ("REDLOCK_RESOURCE", &url)],
        &[
            "run",
            "backup",
            "--guard",
            "backup:fence",
            "--",
            "sh",
            "-c",
            "echo ran",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
}

/// A resource server without the module: every fenced call says so, naming
/// the command, and changes nothing; a fenced inner command the module does
/// not know is the module's own refusal, not a missing module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_without_the_module_is_named_as_such() {
    let nodes = five();
    let plain = Node::builder().without_module().start();
    let redlock = client(&nodes).await;
    let mut con = resource_con(&plain).await;
    let lock = redlock.acquire("bare", TTL).await.unwrap();

    let fenced = lock
        .fenced::<String>(&mut con, "bare:fence", &set("bare:state", "x"))
        .await
        .unwrap_err();
    match &fenced {
        Error::ResourceModuleNotLoaded { resource, command } => {
            assert_eq!(resource, &None);
            assert_eq!(command, "REDLOCK.FENCED");
        }
        other => panic!("expected ResourceModuleNotLoaded, got {other:?}"),
    }
    let text = fenced.to_string();
    assert!(text.contains("not loaded on the resource server"), "{text}");
    assert!(text.contains("loadmodule"), "{text}");

    let announced = lock.announce(&mut con, "bare:fence").await.unwrap_err();
    assert!(
        matches!(&announced, Error::ResourceModuleNotLoaded { command, .. } if command == "REDLOCK.GUARD"),
        "{announced:?}"
    );

    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("bare:state").arg("y");
    pipe.cmd("INCR").arg("bare:n");
    let atomic = lock
        .fenced_atomic::<(String, i64)>(&mut con, "bare:fence", &pipe)
        .await
        .unwrap_err();
    assert!(
        matches!(&atomic, Error::ResourceModuleNotLoaded { command, .. } if command == "REDLOCK.FENCED"),
        "{atomic:?}"
    );
    let keys: Vec<String> = con.keys("*").await.unwrap();
    assert!(keys.is_empty(), "nothing ran: {keys:?}");

    // With the module, an unknown inner command is the module's refusal.
    let resource = Node::start();
    let mut con = resource_con(&resource).await;
    let inner = lock
        .fenced::<String>(&mut con, "bare:fence", &redis::cmd("NOSUCHCOMMAND"))
        .await
        .unwrap_err();
    assert!(
        matches!(&inner, Error::Resource(m) if m.contains("inside REDLOCK.FENCED")),
        "{inner:?}"
    );
    lock.release().await.unwrap();
}
