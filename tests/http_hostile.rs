//! Clients that try to lock others out, against the HTTP server on real loopback
//! sockets (the agent core in this process, as in tests/http.rs): connections that
//! never read, event streams that stop reading, refused streams, and one address
//! taking every slot. `/healthz` keeps answering throughout.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::in_process::{serve_core, Served, Serving};
use tinyperf::agent::config::Config;
use tinyperf::api::http::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{sleep, timeout, Instant};

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n";

async fn start(limits: Limits) -> Served {
    let serving = Serving {
        limits,
        ..Serving::default()
    };
    serve_core(Config::default(), serving, |_| {}).await
}

/// Connects from `from` (any 127.0.0.0/8 address is this machine's own).
async fn connect_from(from: IpAddr, to: SocketAddr, receive_buffer: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(size) = receive_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

fn local(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

/// `/healthz` from `from`: the status code and how long the whole answer took.
async fn healthz(from: IpAddr, addr: SocketAddr) -> (u16, Duration) {
    let started = Instant::now();
    let mut stream = connect_from(from, addr, None).await;
    stream.write_all(HEALTHZ).await.unwrap();
    let mut reply = Vec::new();
    timeout(Duration::from_secs(5), stream.read_to_end(&mut reply))
        .await
        .expect("/healthz answers")
        .unwrap();
    let status = std::str::from_utf8(&reply[9..12]).unwrap().parse().unwrap();
    (status, started.elapsed())
}

/// True once the server has closed `stream` (end of file or reset), within `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut sink = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, stream.read(&mut sink)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_clients_that_never_read_cannot_lock_out_healthz() {
    let idle = Duration::from_secs(2);
    let limits = Limits {
        idle_timeout: idle,
        send_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let server = start(limits.clone()).await;
    let addr = server.addr;

    // /healthz from an address of its own, every 20 ms, for the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            let mut answers = 0;
            while !stop.load(Ordering::Relaxed) {
                let (status, took) = healthz(local(200), addr).await;
                assert_eq!(status, 200);
                slowest = slowest.max(took);
                answers += 1;
                sleep(Duration::from_millis(20)).await;
            }
            (slowest, answers)
        })
    };

    // 300 clients from ten addresses send a request each and never read the answer:
    // more than the global cap, and one address over its own cap.
    let started = Instant::now();
    let mut abusers = Vec::new();
    for i in 0..300u32 {
        let from = if i < 80 {
            local(1)
        } else {
            local(2 + (i % 9) as u8)
        };
        let mut stream = connect_from(from, addr, None).await;
        stream
            .write_all(b"GET /api/v1/status HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        abusers.push(stream);
    }
    // While every slot is taken, a new client still learns the agent is healthy.
    let (status, took) = healthz(local(201), addr).await;
    assert_eq!(status, 200);
    assert!(took < Duration::from_millis(100), "/healthz took {took:?}");

    // Every one of them is closed within the idle bound (and the guard's period).
    let bound = idle + Duration::from_secs(1);
    for (i, stream) in abusers.iter_mut().enumerate() {
        let left =
            (started + bound + Duration::from_secs(2)).saturating_duration_since(Instant::now());
        assert!(
            closed_within(stream, left).await,
            "connection {i} still open {:?} after it was made",
            started.elapsed()
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (slowest, answers) = prober.await.unwrap();
    assert!(answers > 10, "only {answers} /healthz answers");
    assert!(
        slowest < Duration::from_millis(100),
        "/healthz took {slowest:?} at worst"
    );
    assert_eq!(healthz(local(1), addr).await.0, 200, "slots are free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_taking_a_response_is_cut_off() {
    let send = Duration::from_secs(1);
    let server = start(Limits {
        send_timeout: send,
        ..Limits::default()
    })
    .await;
    // A tiny receive window and many pipelined requests for a large document: the
    // answers pile up unsent.
    let mut stream = connect_from(local(3), server.addr, Some(4096)).await;
    let request = b"GET /api/v1/openapi.json HTTP/1.1\r\nhost: test\r\n\r\n".repeat(400);
    stream.write_all(&request).await.unwrap();
    sleep(send * 3 + Duration::from_secs(1)).await;
    assert!(
        closed_within(&mut stream, Duration::from_secs(5)).await,
        "a client that does not read keeps its connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_nobody_reads_gives_its_slot_back() {
    let server = start(Limits {
        max_event_streams: 1,
        send_timeout: Duration::from_secs(1),
        max_event_stream_age: Duration::from_secs(2),
        ..Limits::default()
    })
    .await;
    let addr = server.addr;
    let events = b"GET /api/v1/events HTTP/1.1\r\nhost: test\r\n\r\n";
    let mut stalled = connect_from(local(4), addr, Some(4096)).await;
    stalled.write_all(events).await.unwrap();
    sleep(Duration::from_millis(300)).await;

    // A refused stream is answered 503 and its connection closed, not kept alive.
    let mut refused = connect_from(local(5), addr, None).await;
    refused.write_all(events).await.unwrap();
    let mut reply = Vec::new();
    timeout(Duration::from_secs(5), refused.read_to_end(&mut reply))
        .await
        .expect("the refused stream's connection is closed")
        .unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("too_many_streams"), "{reply}");

    // The stalled reader's stream ends within its bounds and the slot is free again.
    let freed = Instant::now() + Duration::from_secs(6);
    loop {
        let mut next = connect_from(local(6), addr, None).await;
        next.write_all(events).await.unwrap();
        let mut head = [0u8; 12];
        next.read_exact(&mut head).await.unwrap();
        if &head == b"HTTP/1.1 200" {
            break;
        }
        assert!(Instant::now() < freed, "the stalled stream kept its slot");
        sleep(Duration::from_millis(200)).await;
    }
    assert!(closed_within(&mut stalled, Duration::from_secs(3)).await);
}

/// Sends `raw` and reads the whole answer: status and JSON body.
async fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, serde_json::Value) {
    let mut stream = connect_from(local(7), addr, None).await;
    stream.write_all(raw).await.unwrap();
    let mut reply = Vec::new();
    timeout(Duration::from_secs(5), stream.read_to_end(&mut reply))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&reply).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole answer");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let status = head[9..12].parse().unwrap();
    (
        status,
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hypers_own_refusals_carry_the_json_error_and_echoes_are_bounded() {
    let server = start(Limits::default()).await;
    let (status, body) = exchange(server.addr, b"GARBAGE\r\n\r\n").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request");

    let mut huge = b"GET / HTTP/1.1\r\nhost: x\r\nx-big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 100_000));
    huge.extend_from_slice(b"\r\n\r\n");
    let (status, body) = exchange(server.addr, &huge).await;
    assert_eq!(status, 431, "{body}");
    assert_eq!(body["error"]["code"], "headers_too_large");

    let method = "X".repeat(5000);
    let request =
        format!("{method} /api/v1/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let (status, body) = exchange(server.addr, request.as_bytes()).await;
    assert_eq!(status, 405, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.len() < 300, "{} bytes: {message}", message.len());
    assert!(message.contains("5000 bytes"), "{message}");
}

/// One address that holds its whole share of event streams open, idle, is refused more
/// (429, naming its share), and every other address still gets a stream: the server's
/// streams in all are many more than one address's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holding_its_share_of_streams_locks_nobody_else_out() {
    let limits = Limits::default();
    assert!(limits.max_event_streams >= 4 * limits.max_event_streams_per_peer);
    let server = start(limits.clone()).await;
    let addr = server.addr;
    let events = b"GET /api/v1/events HTTP/1.1\r\nhost: test\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..limits.max_event_streams_per_peer {
        let mut stream = connect_from(local(20), addr, None).await;
        stream.write_all(events).await.unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        held.push(stream);
    }
    let mut one_more = connect_from(local(20), addr, None).await;
    one_more.write_all(events).await.unwrap();
    let mut reply = Vec::new();
    timeout(Duration::from_secs(5), one_more.read_to_end(&mut reply))
        .await
        .expect("the refused stream's connection is closed")
        .unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert!(reply.contains("its share"), "{reply}");
    for other in 21..24 {
        let mut stream = connect_from(local(other), addr, None).await;
        stream.write_all(events).await.unwrap();
        let mut head = [0u8; 12];
        timeout(Duration::from_secs(5), stream.read_exact(&mut head))
            .await
            .expect("another address is answered")
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "address 127.0.0.{other}");
    }
    drop(held);
}
