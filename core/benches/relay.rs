//! Benchmarks of the relay codec on the paths the throughput targets depend on: one `send`
//! parsed and forwarded as a framed `deliver` (the 1:1 path), a `room_send` encoded once for a
//! room, and the parse of a `send` by the relay's scanner next to two serde_json readings of the
//! same frame (a borrowed struct and a `Value`), which is how the scanner was chosen.
//!
//! The frame is a typical end-to-end message: a 100-byte base64 `ct` plus `pub`, `nonce` and
//! `id`. Run with `cargo bench -p mesgd-core --bench relay`.

use std::borrow::Cow;
use std::hint::black_box;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mesgd_core::relay::{ClientMessage, DeliverKind, ServerMessage, frame, parse};

const SEND: &[u8] = br#"{"t":"send","to":"mzuhvlpymk6xo3epygfy5h4oeaejofefn3rdhm4qfjmr2dk7fesq","ct":"q83vEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4","pub":"IVL40Zt5HSRFMkLhXy6rbLfP+ntqXtMAl5YOBpiB2xI=","nonce":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYX","id":"m-4711"}"#;
const ROOM_SEND: &[u8] = br#"{"t":"room_send","room":"lobby","ct":"q83vEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4"}"#;
const FROM: &str = "4oymiquy7qobjgx36tejs35zeqt24qpemsnzgtfeswmrw6csxbkq";

/// What a serde_json reader of `send` would deserialize into, borrowing where it can.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct SerdeSend<'a> {
    t: Cow<'a, str>,
    #[serde(borrow)]
    to: Cow<'a, str>,
    #[serde(borrow)]
    ct: Cow<'a, str>,
    #[serde(borrow, rename = "pub")]
    public_key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    nonce: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
}

fn parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("relay_parse_send");
    group.throughput(Throughput::Elements(1));
    group.bench_function("scanner", |b| b.iter(|| parse(black_box(SEND)).unwrap()));
    group.bench_function("serde_json_struct", |b| {
        b.iter(|| serde_json::from_slice::<SerdeSend<'_>>(black_box(SEND)).unwrap())
    });
    group.bench_function("serde_json_value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(SEND)).unwrap())
    });
    group.finish();
}

fn forwarding(c: &mut Criterion) {
    let mut group = c.benchmark_group("relay_forward");
    group.throughput(Throughput::Elements(1));

    // Receive buffer → frame → parse → framed deliver in the recipient's send buffer.
    let mut framed = BytesMut::new();
    frame::encode(SEND, &mut framed);
    let mut rx = BytesMut::with_capacity(4096);
    let mut tx = BytesMut::with_capacity(4096);
    group.bench_function("send_to_framed_deliver", |b| {
        b.iter(|| {
            rx.put_slice(&framed);
            let body = frame::decode(&mut rx, frame::MAX_TCP_FRAME).unwrap().unwrap();
            let ClientMessage::Send(send) = parse(&body).unwrap() else { unreachable!() };
            tx.clear();
            frame::encode_with(&mut tx, |buf| {
                ServerMessage::Deliver(send.deliver(FROM, DeliverKind::Live)).encode(buf)
            });
            black_box(&tx);
        })
    });

    let ClientMessage::Send(send) = parse(SEND).unwrap() else { unreachable!() };
    group.bench_function("encode_deliver", |b| {
        b.iter(|| {
            tx.clear();
            ServerMessage::Deliver(black_box(&send).deliver(FROM, DeliverKind::Live)).encode(&mut tx);
            black_box(&tx);
        })
    });

    // One room_send, parsed and encoded once as a framed room_deliver; fan-out is then a
    // reference-count increment per member.
    group.bench_function("room_send_to_framed_room_deliver", |b| {
        b.iter(|| {
            let ClientMessage::RoomSend { room, ct } = parse(black_box(ROOM_SEND)).unwrap() else {
                unreachable!()
            };
            tx.clear();
            frame::encode_with(&mut tx, |buf| {
                ServerMessage::RoomDeliver { room: &room, from: FROM, ct }.encode(buf)
            });
            black_box(tx.split().freeze());
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = parsing, forwarding
}
criterion_main!(benches);
