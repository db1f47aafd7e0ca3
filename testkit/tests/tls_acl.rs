//! The test kit's TLS and ACL nodes start, and are set up as documented.

use redlock_testkit::{Node, TestPki};

#[test]
fn tls_node_serves_tls_only_and_the_kit_still_reaches_it() {
    let pki = TestPki::generate();
    for file in [
        pki.ca_cert(),
        pki.other_ca_cert(),
        pki.server_cert(),
        pki.client_cert(),
    ] {
        let pem = std::fs::read_to_string(&file).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{file:?}");
    }
    let node = Node::builder().tls(&pki).start();
    assert_eq!(node.url(), format!("rediss://127.0.0.1:{}", node.port()));
    let mut con = node.connection();
    let config: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-auth-clients")
        .query(&mut con)
        .unwrap();
    assert_eq!(config, ["tls-auth-clients", "yes"]);
    let port: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query(&mut con)
        .unwrap();
    assert_eq!(port, ["port", "0"]);
    // The TLS port accepts TCP connections.
    std::net::TcpStream::connect(("127.0.0.1", node.port())).expect("TLS port open");
}

#[test]
fn acl_user_is_created() {
    let node = Node::builder()
        .acl_user(
            "locker on >s3cret ~locks:* resetchannels -@all +redlock.acquire +redlock.release",
        )
        .start();
    assert_eq!(
        node.url_as("locker", "s3cret"),
        format!("redis://locker:s3cret@127.0.0.1:{}", node.port())
    );
    let mut admin = node.connection();
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query(&mut admin).unwrap();
    assert_eq!(users, ["default", "locker"]);

    let mut locker = redis::Client::open(node.url_as("locker", "s3cret"))
        .unwrap()
        .get_connection()
        .unwrap();
    let token: i64 = redis::cmd("REDLOCK.ACQUIRE")
        .arg("locks:a")
        .arg("me")
        .arg(1000)
        .query(&mut locker)
        .unwrap();
    assert!(token > 0);
    let denied = redis::cmd("REDLOCK.ACQUIRE")
        .arg("other:a")
        .arg("me")
        .arg(1000)
        .query::<i64>(&mut locker)
        .unwrap_err();
    assert_eq!(denied.code(), Some("NOPERM"), "{denied}");
    let wrong = redis::Client::open(node.url_as("locker", "nope"))
        .unwrap()
        .get_connection()
        .err()
        .expect("wrong password refused");
    assert_eq!(
        wrong.kind(),
        redis::ErrorKind::AuthenticationFailed,
        "{wrong}"
    );
}
