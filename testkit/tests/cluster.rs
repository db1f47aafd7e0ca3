//! The test kit's cluster starter: shards, replicas, slot map, roles, slot
//! moves and failovers, checked against what the nodes themselves report.

use redlock_testkit::cluster::SLOTS;
use redlock_testkit::Cluster;

fn role(node: &redlock_testkit::Node) -> String {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut node.connection()).unwrap();
    match &role[0] {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("ROLE: {other:?}"),
    }
}

/// `CLUSTER SLOTS` of `node` as (first, last, master port, replica ports).
fn slot_map(node: &redlock_testkit::Node) -> Vec<(u16, u16, u16, Vec<u16>)> {
    let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut node.connection())
        .unwrap();
    let port = |v: &redis::Value| -> u16 {
        let parts: Vec<redis::Value> = redis::from_redis_value(v.clone()).unwrap();
        redis::from_redis_value(parts[1].clone()).unwrap()
    };
    let mut map: Vec<_> = slots
        .iter()
        .map(|row| {
            let first: u16 = redis::from_redis_value(row[0].clone()).unwrap();
            let last: u16 = redis::from_redis_value(row[1].clone()).unwrap();
            let mut replicas: Vec<u16> = row[3..].iter().map(port).collect();
            replicas.sort();
            (first, last, port(&row[2]), replicas)
        })
        .collect();
    map.sort();
    map
}

#[test]
fn three_shards_with_a_replica_each_cover_every_slot_and_agree() {
    let cluster = Cluster::builder().shards(3).replicas(1).start();
    assert_eq!(cluster.shard_count(), 3);
    assert_eq!(cluster.seed_urls().len(), 6);
    let expected: Vec<(u16, u16, u16, Vec<u16>)> = (0..3)
        .map(|s| {
            let nodes = cluster.shard_nodes(s);
            assert_eq!(nodes.len(), 2);
            assert_eq!(role(&nodes[0]), "master");
            assert_eq!(role(&nodes[1]), "slave");
            assert_eq!(cluster.master(s).port(), nodes[0].port());
            assert_eq!(cluster.replicas(s)[0].port(), nodes[1].port());
            let first = (SLOTS as u32 * s as u32 / 3) as u16;
            let last = (SLOTS as u32 * (s as u32 + 1) / 3 - 1) as u16;
            (first, last, nodes[0].port(), vec![nodes[1].port()])
        })
        .collect();
    for s in 0..3 {
        for node in cluster.shard_nodes(s) {
            assert_eq!(slot_map(node), expected, "as seen by {}", node.port());
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut node.connection())
                .unwrap();
            assert!(info.contains("cluster_state:ok"), "{info}");
            assert!(info.contains("cluster_known_nodes:6"), "{info}");
            assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        }
    }
    // The module is loaded on every node.
    let modules: Vec<Vec<redis::Value>> = redis::cmd("MODULE")
        .arg("LIST")
        .query(&mut cluster.shard_nodes(2)[1].connection())
        .unwrap();
    assert!(format!("{modules:?}").contains("redlock"));
    // Slot lookups agree with the server's own key hashing.
    let slot = cluster.slot_of(b"{user1000}.following");
    assert_eq!(slot, cluster.slot_of(b"user1000"));
    let owner = cluster.master_for_slot(slot);
    let _: () = redis::cmd("SET")
        .arg("user1000")
        .arg("x")
        .query(&mut owner.connection())
        .unwrap();
}

#[test]
fn slot_moves_with_its_keys_and_failovers_swap_roles() {
    let mut cluster = Cluster::builder().shards(3).replicas(1).start();
    let slot = cluster.slot_of(b"k");
    let from = cluster.shard_of_slot(slot);
    let to = (from + 1) % 3;
    let mut con = cluster.master(from).connection();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.shard_of_slot(slot), to);
    let moved: redis::RedisResult<String> = redis::cmd("GET").arg("k").query(&mut con);
    let err = moved.unwrap_err();
    assert_eq!(
        err.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
    );
    let value: String = redis::cmd("GET")
        .arg("k")
        .query(&mut cluster.master(to).connection())
        .unwrap();
    assert_eq!(value, "v");

    // Manual failover: the replica becomes the master of the shard.
    let old = cluster.master(to).port();
    let new = cluster.failover(to);
    assert_eq!(role(&cluster.shard_nodes(to)[new]), "master");
    assert_ne!(cluster.master(to).port(), old);
    assert_eq!(cluster.replicas(to)[0].port(), old);

    // Automatic failover after the master dies.
    let killed = cluster.kill_master(to);
    assert_eq!(killed, new);
    assert_eq!(cluster.master(to).port(), old);
    assert!(cluster.replicas(to).is_empty());
    let value: String = redis::cmd("GET")
        .arg("k")
        .query(&mut cluster.master_for_slot(slot).connection())
        .unwrap();
    assert_eq!(value, "v");

    // The killed node comes back as a replica of the new master.
    cluster.restart_node(to, killed);
    assert_eq!(role(&cluster.shard_nodes(to)[killed]), "slave");
    assert_eq!(cluster.master(to).port(), old);
    assert_eq!(
        cluster.replicas(to)[0].port(),
        cluster.shard_nodes(to)[killed].port()
    );
}
