//! A TCP fault proxy between clients and one node, for fault injection.
//!
//! [`FaultProxy::start`] listens on `127.0.0.1:0`; every accepted client
//! connection gets its own upstream connection to the node. Each direction is
//! pumped by a reader thread and a writer thread joined by an ordered queue of
//! chunks, so a fault changes what happens to every chunk from then on, on
//! existing and new connections alike ([`FaultProxy::set`]).
//!
//! Faults ([`Fault`]):
//! - [`Fault::None`]: bytes are forwarded as they come.
//! - [`Fault::Delay`]: every chunk read while the delay is set, in **both**
//!   directions, is delivered no earlier than `delay` after it was read
//!   (one-way latency; a request/reply round trip gains twice the delay). Order
//!   is preserved: a chunk is never delivered before one read earlier, even
//!   when the delay is lowered.
//! - [`Fault::Blackhole`]: connections stay open, nothing is delivered either
//!   way, and new connections are accepted but see no traffic. Bytes are
//!   **held**, not dropped: when the blackhole is lifted they are delivered in
//!   order, as TCP delivers after a partition heals (a request sent into the
//!   blackhole may thus reach the node long after its client gave up). Pair it
//!   with [`FaultProxy::reset_connections`] to drop held bytes instead.
//! - [`Fault::DropReplies`]: requests reach the node, the node's replies are
//!   discarded, so the client times out while the node did apply the command.
//!   A connection that lost reply bytes can no longer be matched request to
//!   reply, so it is closed with a TCP RST as soon as the fault changes to
//!   anything else: a client never mistakes one reply for another's.
//!
//! Per connection, for stale requests (a middlebox that still forwards what a
//! client sent before it went away):
//! - [`FaultProxy::hold_requests`]: the connections open now hold every request
//!   from then on, until [`FaultProxy::deliver_held`]; new connections are not
//!   affected.
//! - [`FaultProxy::cut_clients`]: the connections open now are closed toward
//!   their clients (which see the connection end and reconnect), while their
//!   node side stays open to deliver the requests they still hold; the node's
//!   replies are discarded. [`FaultProxy::held_requests`] shows those requests.
//!
//! When either side closes, whatever is still queued toward the other side is
//! delivered (subject to the fault) and then the whole connection is closed.
//! Dropping the proxy stops its listener and closes all its connections.
//!
//! ```no_run
//! use redlock_testkit::{proxy::{Fault, FaultProxy}, Node};
//! use std::time::Duration;
//! let node = Node::start();
//! let proxy = FaultProxy::start(format!("127.0.0.1:{}", node.port()).parse().unwrap());
//! proxy.set(Fault::Delay(Duration::from_millis(50)));
//! let client = redis::Client::open(proxy.url()).unwrap();
//! ```

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked threads look at their stop flags.
const TICK: Duration = Duration::from_millis(10);
/// Read size of one chunk.
const CHUNK: usize = 16 * 1024;
/// Timeout for connecting to the upstream node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What the proxy does to the traffic; see the [module docs](self).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    #[default]
    None,
    /// Deliver each chunk, in both directions, `delay` after it was read, in order.
    Delay(Duration),
    /// Deliver nothing either way; hold the bytes until the fault is lifted.
    Blackhole,
    /// Forward requests; discard replies (connections that lost replies are
    /// reset when the fault is lifted).
    DropReplies,
}

/// A running proxy. Dropping it stops it and closes its connections.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled on every fault change and every connection close.
    changed: Condvar,
    stopping: AtomicBool,
    next_id: AtomicU64,
}

struct State {
    /// Where new connections go.
    upstream: SocketAddr,
    fault: Fault,
    conns: Vec<Arc<Conn>>,
}

struct Conn {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    closed: AtomicBool,
    /// Reply bytes were discarded on this connection.
    lost_replies: AtomicBool,
    /// Requests are held until [`FaultProxy::deliver_held`].
    held: AtomicBool,
    /// Closed toward the client by [`FaultProxy::cut_clients`]: replies are
    /// discarded.
    cut: AtomicBool,
    /// Requests read from the client and not yet written to the node.
    requests: Arc<Queue>,
    /// The client side reached its end: `requests` has everything it sent.
    requests_ended: AtomicBool,
}

/// Which way a pump moves bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Client → node (requests).
    Up,
    /// Node → client (replies).
    Down,
}

#[derive(Clone)]
enum Item {
    Data(Instant, Vec<u8>),
    Eof(Instant),
}

struct Queue {
    items: Mutex<VecDeque<Item>>,
    ready: Condvar,
}

impl Queue {
    fn new() -> Arc<Queue> {
        Arc::new(Queue {
            items: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultProxy {
    /// Starts a proxy to `upstream`, listening on a free port of 127.0.0.1.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy listener");
        let addr = listener.local_addr().expect("proxy address");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                upstream,
                fault: Fault::None,
                conns: Vec::new(),
            }),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        });
        let s = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || accept_loop(listener, s))
            .expect("spawn proxy thread");
        FaultProxy {
            addr,
            shared,
            listener: Some(handle),
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }

    /// The node behind the proxy (for new connections).
    pub fn upstream(&self) -> SocketAddr {
        lock(&self.shared.state).upstream
    }

    /// Sends new connections to `upstream` from now on; open connections
    /// keep their node (pair it with [`FaultProxy::reset_connections`] to
    /// move every client over), as a load balancer or a DNS alias that
    /// changes its target does.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        lock(&self.shared.state).upstream = upstream;
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        lock(&self.shared.state).fault
    }

    /// Number of client connections open now.
    pub fn connection_count(&self) -> usize {
        lock(&self.shared.state).conns.len()
    }

    /// Applies `fault` to existing and new connections at once. Leaving
    /// [`Fault::DropReplies`] resets every connection that lost a reply.
    pub fn set(&self, fault: Fault) {
        let mut st = lock(&self.shared.state);
        st.fault = fault;
        if fault != Fault::DropReplies {
            for c in &st.conns {
                if c.lost_replies.load(Ordering::SeqCst) {
                    c.abort(true);
                }
            }
        }
        drop(st);
        self.shared.changed.notify_all();
    }

    /// Holds the requests of every connection open now, from now on, until
    /// [`FaultProxy::deliver_held`] (whatever the fault); connections opened
    /// later are not affected. Replies still flow.
    pub fn hold_requests(&self) {
        let st = lock(&self.shared.state);
        for c in &st.conns {
            c.held.store(true, Ordering::SeqCst);
        }
    }

    /// Closes every open connection toward its client (a FIN: the client
    /// sees its connection end) and keeps its node side open: the requests
    /// it still holds or queues are delivered as the fault and
    /// [`FaultProxy::hold_requests`] allow, then the node side is closed too;
    /// the node's replies are discarded. Returns once every such connection
    /// has read all it will get from its client (within a few seconds), so
    /// that [`FaultProxy::held_requests`] is complete.
    pub fn cut_clients(&self) {
        let cut: Vec<Arc<Conn>> = lock(&self.shared.state).conns.clone();
        for c in &cut {
            c.cut.store(true, Ordering::SeqCst);
            let _ = c.client.shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while cut
            .iter()
            .any(|c| !c.is_closed() && !c.requests_ended.load(Ordering::SeqCst))
        {
            assert!(
                Instant::now() < deadline,
                "a cut connection kept reading from its client"
            );
            std::thread::sleep(TICK / 2);
        }
    }

    /// The requests held by [`FaultProxy::hold_requests`] and not delivered
    /// yet, in the order each connection received them (connections in the
    /// order they were opened).
    pub fn held_requests(&self) -> Vec<u8> {
        let st = lock(&self.shared.state);
        let mut out = Vec::new();
        for c in st.conns.iter().filter(|c| c.held.load(Ordering::SeqCst)) {
            for item in lock(&c.requests.items).iter() {
                if let Item::Data(_, bytes) = item {
                    out.extend_from_slice(bytes);
                }
            }
        }
        out
    }

    /// Lets every held connection deliver its requests (in order).
    pub fn deliver_held(&self) {
        let st = lock(&self.shared.state);
        for c in &st.conns {
            c.held.store(false, Ordering::SeqCst);
        }
        drop(st);
        self.shared.changed.notify_all();
    }

    /// Closes every open connection with a TCP RST (SO_LINGER 0) on both
    /// sides; bytes still held or queued are dropped.
    pub fn reset_connections(&self) {
        let st = lock(&self.shared.state);
        for c in &st.conns {
            c.abort(true);
        }
        drop(st);
        self.shared.changed.notify_all();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            let st = lock(&self.shared.state);
            for c in &st.conns {
                c.abort(false);
            }
        }
        self.shared.changed.notify_all();
        if let Some(h) = self.listener.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                open_connection(client, &shared);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(TICK / 2),
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

fn open_connection(client: TcpStream, shared: &Arc<Shared>) {
    let upstream = lock(&shared.state).upstream;
    let server = match TcpStream::connect_timeout(&upstream, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(_) => {
            // Node down: the client sees its connection reset.
            set_linger_zero(&client);
            return;
        }
    };
    for s in [&client, &server] {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(TICK));
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    }
    let conn = Arc::new(Conn {
        id: shared.next_id.fetch_add(1, Ordering::SeqCst),
        client,
        server,
        closed: AtomicBool::new(false),
        lost_replies: AtomicBool::new(false),
        held: AtomicBool::new(false),
        cut: AtomicBool::new(false),
        requests: Queue::new(),
        requests_ended: AtomicBool::new(false),
    });
    {
        let mut st = lock(&shared.state);
        if shared.stopping.load(Ordering::SeqCst) {
            conn.abort(false);
            return;
        }
        st.conns.push(Arc::clone(&conn));
    }
    for dir in [Dir::Up, Dir::Down] {
        let queue = match dir {
            Dir::Up => Arc::clone(&conn.requests),
            Dir::Down => Queue::new(),
        };
        let (c, s, q) = (Arc::clone(&conn), Arc::clone(shared), Arc::clone(&queue));
        let name = format!(
            "proxy-conn-{}-{}",
            conn.id,
            if dir == Dir::Up { "up" } else { "down" }
        );
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-r"))
            .spawn(move || reader(c, s, q, dir))
            .is_ok()
            && {
                let (c, s) = (Arc::clone(&conn), Arc::clone(shared));
                std::thread::Builder::new()
                    .name(format!("{name}-w"))
                    .spawn(move || writer(c, s, queue, dir))
                    .is_ok()
            };
        if !spawned {
            conn.abort(true);
        }
    }
}

impl Conn {
    fn source(&self, dir: Dir) -> &TcpStream {
        match dir {
            Dir::Up => &self.client,
            Dir::Down => &self.server,
        }
    }

    fn sink(&self, dir: Dir) -> &TcpStream {
        match dir {
            Dir::Up => &self.server,
            Dir::Down => &self.client,
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes both sockets; with `rst`, as an abortive close (RST). The file
    /// descriptors are released when the pump threads drop their handles.
    fn abort(&self, rst: bool) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for s in [&self.client, &self.server] {
            if rst {
                set_linger_zero(s);
                // Wakes blocked readers; the RST goes out on the final close.
                let _ = s.shutdown(Shutdown::Read);
            } else {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn set_linger_zero(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a correctly sized struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Reads chunks and queues them with their delivery time.
fn reader(conn: Arc<Conn>, shared: Arc<Shared>, queue: Arc<Queue>, dir: Dir) {
    let mut buf = vec![0u8; CHUNK];
    let mut last_due = Instant::now();
    let mut src = conn.source(dir);
    loop {
        if conn.is_closed() {
            break;
        }
        let result = src.read(&mut buf);
        let delay = match lock(&shared.state).fault {
            Fault::Delay(d) => d,
            _ => Duration::ZERO,
        };
        // Never before a chunk read earlier: order is kept when the delay drops.
        let due = (Instant::now() + delay).max(last_due);
        last_due = due;
        let item = match result {
            Ok(0) => Item::Eof(due),
            Ok(n) => Item::Data(due, buf[..n].to_vec()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Item::Eof(due),
        };
        let eof = matches!(item, Item::Eof(_));
        lock(&queue.items).push_back(item);
        if eof && dir == Dir::Up {
            conn.requests_ended.store(true, Ordering::SeqCst);
        }
        queue.ready.notify_all();
        if eof {
            break;
        }
    }
    queue.ready.notify_all();
}

/// Delivers queued chunks when due and allowed by the fault.
fn writer(conn: Arc<Conn>, shared: Arc<Shared>, queue: Arc<Queue>, dir: Dir) {
    let mut dst = conn.sink(dir);
    'outer: loop {
        // Next item, waiting for one while the connection lives. It stays
        // queued until delivered (so that `held_requests` sees it).
        let item = {
            let mut items = lock(&queue.items);
            loop {
                if conn.is_closed() {
                    break 'outer;
                }
                if let Some(item) = items.front() {
                    break item.clone();
                }
                items = queue
                    .ready
                    .wait_timeout(items, TICK)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        let due = match &item {
            Item::Data(due, _) | Item::Eof(due) => *due,
        };
        // Wait until due.
        loop {
            if conn.is_closed() {
                break 'outer;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::sleep((due - now).min(TICK));
        }
        // Wait while blackholed or held; decide under the state lock so that
        // `set` sees every discarded reply.
        let forward = {
            let mut st = lock(&shared.state);
            loop {
                if conn.is_closed() {
                    break 'outer;
                }
                let held = dir == Dir::Up && conn.held.load(Ordering::SeqCst);
                match st.fault {
                    _ if held => {}
                    Fault::Blackhole => {}
                    Fault::DropReplies if dir == Dir::Down => {
                        if matches!(item, Item::Data(..)) {
                            conn.lost_replies.store(true, Ordering::SeqCst);
                        }
                        break false;
                    }
                    _ if dir == Dir::Down && conn.cut.load(Ordering::SeqCst) => break false,
                    _ => break true,
                }
                st = shared
                    .changed
                    .wait_timeout(st, TICK)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        lock(&queue.items).pop_front();
        match item {
            Item::Data(_, bytes) => {
                if forward && dst.write_all(&bytes).is_err() {
                    break;
                }
            }
            Item::Eof(_) => break,
        }
    }
    // One side is gone (or we were told to stop): close the whole connection.
    conn.abort(false);
    forget(&shared, conn.id);
}

fn forget(shared: &Shared, id: u64) {
    let mut st = lock(&shared.state);
    st.conns.retain(|c| c.id != id);
    drop(st);
    shared.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Node;

    fn node_addr(node: &Node) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], node.port()))
    }

    fn connect(url: &str, timeout: Duration) -> redis::Connection {
        let con = redis::Client::open(url)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        con.set_read_timeout(Some(timeout)).unwrap();
        con
    }

    fn ping(con: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(con)
    }

    #[test]
    fn forwards_without_fault() {
        let node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        assert!(proxy.url().starts_with("redis://127.0.0.1:"));
        let mut con = connect(&proxy.url(), Duration::from_secs(2));
        let token: i64 = redis::cmd("REDLOCK.ACQUIRE")
            .arg("k")
            .arg("me")
            .arg(1000)
            .query(&mut con)
            .unwrap();
        assert_eq!(token, 1);
        // A large value crosses in several chunks, in order.
        let big = "x".repeat(200_000);
        let _: () = redis::cmd("SET")
            .arg("big")
            .arg(&big)
            .query(&mut con)
            .unwrap();
        let back: String = redis::cmd("GET").arg("big").query(&mut con).unwrap();
        assert_eq!(back, big);
    }

    #[test]
    fn delay_adds_latency_both_ways_and_keeps_order() {
        let node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        let mut con = connect(&proxy.url(), Duration::from_secs(5));
        ping(&mut con).unwrap();
        proxy.set(Fault::Delay(Duration::from_millis(100)));
        let t = Instant::now();
        ping(&mut con).unwrap();
        let rtt = t.elapsed();
        assert!(rtt >= Duration::from_millis(200), "round trip {rtt:?}");
        assert!(rtt < Duration::from_millis(1500), "round trip {rtt:?}");
        // Pipelined commands come back in order.
        let mut pipe = redis::pipe();
        for _ in 0..20 {
            pipe.cmd("INCR").arg("n").ignore();
            pipe.cmd("GET").arg("n");
        }
        let got: Vec<i64> = pipe.query(&mut con).unwrap();
        assert_eq!(got, (1..=20).collect::<Vec<_>>());
        proxy.set(Fault::None);
        let t = Instant::now();
        ping(&mut con).unwrap();
        // Still delayed, the round trip would take at least 200 ms.
        let rtt = t.elapsed();
        assert!(rtt < Duration::from_millis(200), "round trip {rtt:?}");
    }

    #[test]
    fn blackhole_holds_traffic_until_lifted() {
        let node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        let mut con = connect(&proxy.url(), Duration::from_millis(300));
        ping(&mut con).unwrap();
        proxy.set(Fault::Blackhole);
        let err = redis::cmd("SET")
            .arg("held")
            .arg("1")
            .query::<()>(&mut con)
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        // The node has not seen the held request.
        let mut direct = node.connection();
        let v: Option<String> = redis::cmd("GET").arg("held").query(&mut direct).unwrap();
        assert_eq!(v, None);
        // New connections are accepted but see nothing either.
        let mut other = TcpStream::connect(proxy.addr()).unwrap();
        other
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        other.write_all(b"PING\r\n").unwrap();
        let mut buf = [0u8; 16];
        let e = other.read(&mut buf).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        );
        proxy.set(Fault::None);
        // Held bytes are delivered once the blackhole is lifted.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let v: Option<String> = redis::cmd("GET").arg("held").query(&mut direct).unwrap();
            if v.as_deref() == Some("1") {
                break;
            }
            assert!(Instant::now() < deadline, "held request never delivered");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut fresh = connect(&proxy.url(), Duration::from_secs(2));
        assert_eq!(ping(&mut fresh).unwrap(), "PONG");
    }

    #[test]
    fn drop_replies_applies_on_node_and_times_out_client() {
        let node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        let mut con = connect(&proxy.url(), Duration::from_millis(300));
        ping(&mut con).unwrap();
        proxy.set(Fault::DropReplies);
        let err = redis::cmd("REDLOCK.ACQUIRE")
            .arg("k")
            .arg("ghost")
            .arg(5000)
            .query::<Option<i64>>(&mut con)
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        // The node applied it: the lock is held with token 1.
        let mut direct = node.connection();
        let view: Vec<redis::Value> = redis::cmd("REDLOCK.INSPECT")
            .arg("k")
            .query(&mut direct)
            .unwrap();
        assert_eq!(view[1], redis::Value::Int(1), "held: {view:?}");
        assert_eq!(view[5], redis::Value::Int(1), "token: {view:?}");
        assert_eq!(proxy.connection_count(), 1);
        // Lifting the fault resets the connection that lost a reply.
        proxy.set(Fault::None);
        assert!(ping(&mut con).is_err());
        let mut fresh = connect(&proxy.url(), Duration::from_secs(2));
        assert_eq!(ping(&mut fresh).unwrap(), "PONG");
    }

    #[test]
    fn held_requests_of_a_cut_client_reach_the_node_only_when_delivered() {
        let node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        let mut old = connect(&proxy.url(), Duration::from_millis(300));
        ping(&mut old).unwrap();
        proxy.hold_requests();
        let err = redis::cmd("SET")
            .arg("stale")
            .arg("1")
            .query::<()>(&mut old)
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        proxy.cut_clients();
        // The client sees its connection end; a new one is not held.
        assert!(ping(&mut old).is_err());
        let mut fresh = connect(&proxy.url(), Duration::from_secs(2));
        let _: () = redis::cmd("SET")
            .arg("stale")
            .arg("2")
            .query(&mut fresh)
            .unwrap();
        let held = String::from_utf8_lossy(&proxy.held_requests()).into_owned();
        assert!(held.contains("stale"), "held: {held:?}");
        let mut direct = node.connection();
        let v: String = redis::cmd("GET").arg("stale").query(&mut direct).unwrap();
        assert_eq!(v, "2");
        // Delivered late, after the new connection's write.
        proxy.deliver_held();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let v: String = redis::cmd("GET").arg("stale").query(&mut direct).unwrap();
            if v == "1" {
                break;
            }
            assert!(Instant::now() < deadline, "held request never delivered");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(proxy.held_requests().is_empty());
        assert_eq!(ping(&mut fresh).unwrap(), "PONG");
    }

    #[test]
    fn reset_connections_sends_rst() {
        let node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        let mut raw = TcpStream::connect(proxy.addr()).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        raw.write_all(b"PING\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = raw.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"+PONG\r\n");
        proxy.reset_connections();
        let err = raw.read(&mut buf).map(|n| n.to_string());
        match err {
            Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
            Ok(n) => panic!("expected a reset, read {n} bytes"),
        }
        // The proxy keeps accepting.
        let mut con = connect(&proxy.url(), Duration::from_secs(2));
        assert_eq!(ping(&mut con).unwrap(), "PONG");
    }

    #[test]
    fn node_down_closes_client_and_drop_stops_proxy() {
        let mut node = Node::start();
        let proxy = FaultProxy::start(node_addr(&node));
        let mut con = connect(&proxy.url(), Duration::from_secs(2));
        ping(&mut con).unwrap();
        node.kill();
        assert!(ping(&mut con).is_err());
        assert!(redis::Client::open(proxy.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(1))
            .and_then(|mut c| ping(&mut c))
            .is_err());
        node.restart();
        let mut con = connect(&proxy.url(), Duration::from_secs(2));
        ping(&mut con).unwrap();
        let addr = proxy.addr();
        drop(proxy);
        assert!(ping(&mut con).is_err());
        assert!(TcpStream::connect(addr).is_err());
    }
}
