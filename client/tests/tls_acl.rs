//! TLS with a private CA and client certificates, and ACL users: the client
//! and the `redlock` CLI against real TLS-only and ACL-protected nodes.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{held_on, NODE_TIMEOUT};
use redlock_client::{Error, Redlock, RedlockBuilder, RetryPolicy};
use redlock_testkit::{start_nodes, Node, TestPki};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

/// The ACL line of the README: a user that may run only the REDLOCK
/// commands, only on keys under `locks:`.
const LOCKER_ACL: &str = "locker on >s3cret-pw resetkeys ~locks:* resetchannels -@all +redlock.acquire +redlock.release +redlock.extend +redlock.fence +redlock.inspect +redlock.wait +info";

/// Bound on one connection: TLS handshakes of a debug build on a loaded
/// machine can take a while.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn builder(urls: Vec<String>) -> RedlockBuilder {
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
}

fn err_text<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

/// Runs `redlock ARGS` with `env`, stdin closed.
fn cli(env: &[(&str, String)], args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command
        .env_remove("REDLOCK_TLS_CA")
        .env_remove("REDLOCK_TLS_CERT")
        .env_remove("REDLOCK_TLS_KEY")
        .args(["--connect-timeout", "10s", "--node-timeout", "2s"])
        .args(args)
        .stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run redlock")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn path(p: &std::path::Path) -> String {
    p.to_str().unwrap().to_string()
}

/// A numeric field of the node's `INFO redlock`.
fn info_field(node: &Node, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut node.connection())
        .expect("INFO redlock");
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO redlock: {info}"))
}

/// Five TLS-only nodes with a private CA and `tls-auth-clients yes`.
fn five_tls(pki: &TestPki) -> Vec<Node> {
    start_nodes(5, &Node::builder().tls(pki).acl_user(LOCKER_ACL))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_ca_and_client_certificate() {
    let pki = TestPki::generate();
    let nodes = five_tls(&pki);
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")));

    let redlock = builder(urls.clone())
        .tls_ca_file(pki.ca_cert())
        .tls_client_cert(pki.client_cert(), pki.client_key())
        .build()
        .await
        .expect("build over TLS");
    let mut lock = redlock
        .try_acquire("tls", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("acquired");
    assert_eq!(held_on(&redlock, "tls").await, 5);
    lock.extend(Duration::from_secs(20)).await.expect("extend");
    assert!(lock.validity() > Duration::from_secs(15));
    assert!(lock.release().await.unwrap());
    assert_eq!(held_on(&redlock, "tls").await, 0);

    // Waiting for a busy lock: REDLOCK.WAIT on TLS connections of its own.
    let holder = redlock
        .try_acquire("tls-wait", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acquired");
    let waiter = redlock.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_wait("tls-wait", Duration::from_secs(5), Duration::from_secs(8))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(holder.release().await.unwrap());
    let next = waiting.await.unwrap().expect("the waiter gets the lock");
    assert!(next.release().await.unwrap());

    // The CLI, with the files from flags and, as an ACL user, from the
    // environment.
    let nodes_env = ("REDLOCK_NODES", urls.join(","));
    let files = [
        "--tls-ca",
        &path(&pki.ca_cert()),
        "--tls-cert",
        &path(&pki.client_cert()),
        "--tls-key",
        &path(&pki.client_key()),
    ]
    .map(String::from);
    let mut args: Vec<&str> = files.iter().map(String::as_str).collect();
    args.extend(["--json", "acquire", "tls-cli", "--ttl", "20s"]);
    let out = cli(std::slice::from_ref(&nodes_env), &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let owner = v["owner"].as_str().unwrap().to_string();
    assert_eq!(held_on(&redlock, "tls-cli").await, 5);
    let mut args: Vec<&str> = files.iter().map(String::as_str).collect();
    args.extend(["release", "tls-cli", "--owner", &owner]);
    let out = cli(&[nodes_env], &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(held_on(&redlock, "tls-cli").await, 0);

    let user_urls: Vec<String> = nodes
        .iter()
        .map(|n| n.url_as("locker", "s3cret-pw"))
        .collect();
    let env = [
        ("REDLOCK_NODES", user_urls.join(",")),
        ("REDLOCK_TLS_CA", path(&pki.ca_cert())),
        ("REDLOCK_TLS_CERT", path(&pki.client_cert())),
        ("REDLOCK_TLS_KEY", path(&pki.client_key())),
    ];
    let out = cli(
        &env,
        &[
            "run",
            "locks:cli",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "sleep 1; echo $REDLOCK_TOKEN",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<u64>()
        .is_ok());
    assert_eq!(held_on(&redlock, "locks:cli").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_errors_say_what_is_wrong() {
    let pki = TestPki::generate();
    let nodes = five_tls(&pki);
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();

    // No client certificate: the server requires one.
    let text = err_text(
        builder(urls.clone())
            .tls_ca_file(pki.ca_cert())
            .build()
            .await,
    );
    assert!(text.starts_with("no quorum: 0 of 5"), "{text}");
    assert_eq!(
        text.matches("the server requires a client certificate")
            .count(),
        5,
        "{text}"
    );
    assert!(text.contains("CertificateRequired"), "{text}");

    // A CA that did not sign the servers' certificates.
    let text = err_text(
        builder(urls.clone())
            .tls_ca_file(pki.other_ca_cert())
            .tls_client_cert(pki.client_cert(), pki.client_key())
            .build()
            .await,
    );
    assert_eq!(
        text.matches("signed by a CA that is not trusted").count(),
        5,
        "{text}"
    );
    assert!(text.contains("UnknownIssuer"), "{text}");

    // No CA at all: the system's trust store does not know the private CA.
    let text = err_text(builder(urls.clone()).build().await);
    assert!(text.contains("UnknownIssuer"), "{text}");

    // Missing and wrong files are named.
    let missing = pki.dir().join("missing.crt");
    let Error::InvalidArgument(text) = builder(urls.clone())
        .tls_ca_file(&missing)
        .build()
        .await
        .unwrap_err()
    else {
        panic!("a missing CA file is an invalid argument")
    };
    assert!(text.contains(&path(&missing)), "{text}");
    let text = err_text(
        builder(urls.clone())
            .tls_ca_file(pki.ca_cert())
            .tls_client_cert(pki.client_cert(), pki.client_cert())
            .build()
            .await,
    );
    assert!(
        text.contains(&format!("TLS client key file {}", path(&pki.client_cert()))),
        "{text}"
    );

    // Verification cannot be turned off through the URL.
    let insecure: Vec<String> = urls.iter().map(|u| format!("{u}/#insecure")).collect();
    let text = err_text(builder(insecure).build().await);
    assert!(text.contains("cannot be turned off"), "{text}");

    // The CLI says the same, in one line.
    let env = [("REDLOCK_NODES", urls.join(","))];
    let out = cli(&env, &["--tls-ca", &path(&pki.ca_cert()), "inspect", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the server requires a client certificate"),
        "{err}"
    );
    let out = cli(
        &env,
        &[
            "--tls-ca",
            &path(&pki.other_ca_cert()),
            "--tls-cert",
            &path(&pki.client_cert()),
            "--tls-key",
            &path(&pki.client_key()),
            "inspect",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("UnknownIssuer"), "{}", stderr(&out));
    let out = cli(&env, &["--tls-ca", &path(&missing), "inspect", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(&path(&missing)), "{}", stderr(&out));
    // A certificate without its key is a usage error.
    let out = cli(
        &env,
        &["--tls-cert", &path(&pki.client_cert()), "inspect", "x"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--tls-key"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_with_only_the_lock_commands() {
    let readme = include_str!("../../docs/guide/tls.md");
    let documented = LOCKER_ACL.replace("s3cret-pw", "s3cret");
    assert!(
        readme.contains(&documented),
        "the guide's ACL line (docs/guide/tls.md) differs from the tested one: {documented}"
    );

    let nodes = start_nodes(5, &Node::builder().acl_user(LOCKER_ACL));
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| n.url_as("locker", "s3cret-pw"))
        .collect();
    let redlock = builder(urls.clone())
        .build()
        .await
        .expect("build as locker");
    let lock = redlock
        .try_acquire("locks:x", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("acquired");
    assert_eq!(held_on(&redlock, "locks:x").await, 5);
    assert!(lock.release().await.unwrap());

    // Waiting for a busy lock needs +redlock.wait.
    let holder = redlock
        .try_acquire("locks:w", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acquired");
    let waiter = redlock.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_wait("locks:w", Duration::from_secs(5), Duration::from_secs(8))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = std::time::Instant::now();
    assert!(holder.release().await.unwrap());
    let next = waiting.await.unwrap().expect("the waiter gets the lock");
    assert!(
        released_at.elapsed() < Duration::from_secs(3),
        "woken, not timed out"
    );
    assert!(next.release().await.unwrap());
    // The waiter was woken by REDLOCK.WAIT (without +redlock.wait it would
    // fall back to polling).
    let woken: u64 = nodes
        .iter()
        .map(|n| info_field(n, "redlock_wait_woken"))
        .sum();
    assert!(woken >= 3, "REDLOCK.WAIT woke {woken} times");

    let err = redlock
        .try_acquire("other:x", Duration::from_secs(5))
        .await
        .unwrap_err();
    let Error::PermissionDenied { nodes: refused, .. } = &err else {
        panic!("expected PermissionDenied, got {err:?}")
    };
    assert!(refused.len() >= 3, "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("permission denied by the ACL of 127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("NOPERM"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");

    let out = cli(
        &[("REDLOCK_NODES", urls.join(","))],
        &["acquire", "other:x"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
    let out = cli(
        &[("REDLOCK_NODES", urls.join(","))],
        &["--json", "acquire", "locks:y", "--ttl", "5s"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // `+info` in the line lets the client tell members apart: one server
    // listed as 127.0.0.1 and as localhost is refused.
    let mut aliased = urls.clone();
    aliased[1] = aliased[0].replace("127.0.0.1", "localhost");
    let text = err_text(builder(aliased).build().await);
    assert!(text.contains("are the same Redis server"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");

    // A wrong password: every node is named with "authentication failed",
    // and the password appears nowhere.
    let wrong: Vec<String> = nodes
        .iter()
        .map(|n| n.url_as("locker", "wrong-pw-123"))
        .collect();
    let text = err_text(builder(wrong.clone()).build().await);
    for n in &nodes {
        assert!(
            text.contains(&format!(
                "127.0.0.1:{} (not connected: authentication failed",
                n.port()
            )),
            "{text}"
        );
    }
    assert!(!text.contains("wrong-pw-123"), "{text}");
    let out = cli(
        &[("REDLOCK_NODES", wrong.join(","))],
        &["inspect", "locks:x"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("authentication failed"), "{err}");
    assert!(!err.contains("wrong-pw-123"), "{err}");

    // The password-only form (requirepass, the default user).
    for n in &nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("only-pw")
            .query(&mut n.connection())
            .unwrap();
    }
    let password_only: Vec<String> = nodes.iter().map(|n| n.url_as("", "only-pw")).collect();
    assert!(password_only[0].starts_with("redis://:only-pw@127.0.0.1:"));
    let redlock = builder(password_only)
        .build()
        .await
        .expect("build with a password");
    let lock = redlock
        .try_acquire("any", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("acquired");
    assert!(lock.release().await.unwrap());
    let no_password: Vec<String> = nodes.iter().map(Node::url).collect();
    let text = err_text(builder(no_password).build().await);
    assert_eq!(text.matches("authentication failed").count(), 5, "{text}");
}
