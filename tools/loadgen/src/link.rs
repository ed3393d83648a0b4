//! One connection of a load run, whatever its transport and framing.
//!
//! A [`Link`] is a [`Reader`] and a [`Writer`] over a TCP stream or a connected UDP socket. The
//! writer appends whole messages to one buffer (an MQTT packet, a length-prefixed JSON frame, a
//! masked WebSocket frame, a datagram) and [`Writer::flush`] writes them at once, so a batch of
//! messages costs one system call; the reader reads what is there and hands out complete
//! messages one by one. Reader and writer are separate fields so that a task can answer what it
//! reads (a PUBACK, a pong) while it reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, UdpSocket};

use crate::error::{FrameError, SetupError};
use crate::mqtt::codec;
use crate::ws::{self, opcode};

/// The largest frame of the JSON relay on TCP and WebSocket (docs/relay.md).
pub(crate) const RELAY_MAX_FRAME: usize = 65_536;
/// The largest datagram accepted.
const MAX_DATAGRAM: usize = 65_536;
/// Bytes read per `read` call at most.
const READ_CHUNK: usize = 64 * 1024;
/// Datagrams taken per wake-up at most.
const DATAGRAM_BATCH: usize = 64;

/// How messages are delimited on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// MQTT packets.
    Mqtt,
    /// A 4-byte big-endian length, then the body (the relay over TCP).
    Length32,
    /// One WebSocket text frame per message.
    WebSocket,
    /// One datagram per message.
    Datagram,
}

enum ReadIo {
    Tcp(OwnedReadHalf),
    Udp(Arc<UdpSocket>),
}

enum WriteIo {
    Tcp(OwnedWriteHalf),
    Udp(Arc<UdpSocket>),
}

/// Something read from a link.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event<'a> {
    /// One complete message (an MQTT packet with its header, a JSON body, a datagram).
    Message(&'a [u8]),
    /// A WebSocket ping; the caller answers it with [`Writer::pong`].
    Ping(&'a [u8]),
    /// A WebSocket close frame, with its status code if it had one.
    Close(Option<u16>),
}

/// The reading side of a link.
pub(crate) struct Reader {
    io: ReadIo,
    framing: Framing,
    buf: Vec<u8>,
    pos: usize,
    /// Fragments of a WebSocket message read so far.
    assembly: Vec<u8>,
    assembling: bool,
    /// The assembly was handed out by the last `next` and is cleared by the following one.
    assembly_out: bool,
    datagram: Vec<u8>,
}

impl Reader {
    fn new(io: ReadIo, framing: Framing, initial: Vec<u8>) -> Reader {
        Reader {
            io,
            framing,
            buf: initial,
            pos: 0,
            assembly: Vec::new(),
            assembling: false,
            assembly_out: false,
            datagram: Vec::new(),
        }
    }

    /// Reads what the socket has (waiting until it has something). `Ok(false)` when the peer
    /// closed the connection.
    pub(crate) async fn fill(&mut self) -> std::io::Result<bool> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        match &mut self.io {
            ReadIo::Tcp(rd) => {
                self.buf.reserve(READ_CHUNK);
                Ok(rd.read_buf(&mut self.buf).await? > 0)
            }
            ReadIo::Udp(sock) => {
                // Datagrams are kept as length-prefixed records, so that `next` reads them like
                // TCP frames.
                self.datagram.resize(MAX_DATAGRAM, 0);
                let n = sock.recv(&mut self.datagram).await?;
                push_record(&mut self.buf, &self.datagram[..n]);
                for _ in 1..DATAGRAM_BATCH {
                    match sock.try_recv(&mut self.datagram) {
                        Ok(n) => push_record(&mut self.buf, &self.datagram[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                Ok(true)
            }
        }
    }

    /// The next complete message or control event in what was read, or `None`.
    pub(crate) fn next(&mut self) -> Result<Option<Event<'_>>, FrameError> {
        if self.assembly_out {
            self.assembly.clear();
            self.assembly_out = false;
        }
        loop {
            let rest = &self.buf[self.pos..];
            match self.framing {
                Framing::Mqtt => {
                    let Some(n) = codec::packet_len(rest)? else { return Ok(None) };
                    let start = self.pos;
                    self.pos += n;
                    return Ok(Some(Event::Message(&self.buf[start..start + n])));
                }
                Framing::Length32 | Framing::Datagram => {
                    let Some(head) = rest.get(..4) else { return Ok(None) };
                    let len = u32::from_be_bytes(head.try_into().expect("4 bytes")) as usize;
                    if self.framing == Framing::Length32 && len > RELAY_MAX_FRAME {
                        return Err(FrameError::TooLarge { len, max: RELAY_MAX_FRAME });
                    }
                    if rest.len() < 4 + len {
                        return Ok(None);
                    }
                    let start = self.pos + 4;
                    self.pos += 4 + len;
                    return Ok(Some(Event::Message(&self.buf[start..start + len])));
                }
                Framing::WebSocket => {
                    let Some(frame) = ws::read_frame(rest, RELAY_MAX_FRAME)? else { return Ok(None) };
                    let start = self.pos + frame.wire_len - frame.payload.len();
                    let (fin, op, len) = (frame.fin, frame.op, frame.payload.len());
                    self.pos += frame.wire_len;
                    let payload = start..start + len;
                    match op {
                        opcode::PING => return Ok(Some(Event::Ping(&self.buf[payload]))),
                        opcode::PONG => continue,
                        opcode::CLOSE => {
                            let code = self.buf[payload].get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]));
                            return Ok(Some(Event::Close(code)));
                        }
                        opcode::CONTINUATION if !self.assembling => {
                            return Err(ws::WsError::Fragmentation.into());
                        }
                        opcode::TEXT | opcode::BINARY if self.assembling => {
                            return Err(ws::WsError::Fragmentation.into());
                        }
                        _ if fin && !self.assembling => return Ok(Some(Event::Message(&self.buf[payload]))),
                        _ => {
                            if self.assembly.len() + len > RELAY_MAX_FRAME {
                                let len = (self.assembly.len() + len) as u64;
                                return Err(ws::WsError::TooLarge { len, max: RELAY_MAX_FRAME }.into());
                            }
                            self.assembly.extend_from_slice(&self.buf[payload]);
                            self.assembling = !fin;
                            if fin {
                                self.assembly_out = true;
                                return Ok(Some(Event::Message(&self.assembly)));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether the peer has closed a stream connection (never blocks; reads nothing that a
    /// later `fill` would miss, since it is only used on idle connections).
    pub(crate) fn peer_closed(&mut self) -> bool {
        match &mut self.io {
            ReadIo::Tcp(rd) => {
                let mut byte = [0u8; 1];
                match rd.try_read(&mut byte) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                }
            }
            ReadIo::Udp(_) => false,
        }
    }
}

fn push_record(buf: &mut Vec<u8>, datagram: &[u8]) {
    buf.extend_from_slice(&(datagram.len() as u32).to_be_bytes());
    buf.extend_from_slice(datagram);
}

/// The writing side of a link.
pub(crate) struct Writer {
    io: WriteIo,
    framing: Framing,
    buf: Vec<u8>,
    /// Where each queued datagram ends in `buf`.
    ends: Vec<usize>,
    scratch: Vec<u8>,
}

impl Writer {
    fn new(io: WriteIo, framing: Framing) -> Writer {
        Writer { io, framing, buf: Vec::new(), ends: Vec::new(), scratch: Vec::new() }
    }

    /// Queues one message whose body `build` appends to the vector it is given.
    pub(crate) fn message(&mut self, build: impl FnOnce(&mut Vec<u8>)) {
        match self.framing {
            Framing::Mqtt => build(&mut self.buf),
            Framing::Length32 => {
                let at = self.buf.len();
                self.buf.extend_from_slice(&[0; 4]);
                build(&mut self.buf);
                let len = (self.buf.len() - at - 4) as u32;
                self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
            }
            Framing::WebSocket => {
                self.scratch.clear();
                build(&mut self.scratch);
                ws::put_frame(&mut self.buf, opcode::TEXT, &self.scratch, fastrand::u32(..).to_ne_bytes());
            }
            Framing::Datagram => {
                build(&mut self.buf);
                self.ends.push(self.buf.len());
            }
        }
    }

    /// Queues the answer to a WebSocket ping.
    pub(crate) fn pong(&mut self, payload: &[u8]) {
        if self.framing == Framing::WebSocket {
            ws::put_frame(&mut self.buf, opcode::PONG, payload, fastrand::u32(..).to_ne_bytes());
        }
    }

    /// Whether messages are queued.
    pub(crate) fn has_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Writes everything queued.
    pub(crate) async fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.io {
            WriteIo::Tcp(wr) => wr.write_all(&self.buf).await?,
            WriteIo::Udp(sock) => {
                let mut start = 0;
                for &end in &self.ends {
                    sock.send(&self.buf[start..end]).await?;
                    start = end;
                }
                self.ends.clear();
            }
        }
        self.buf.clear();
        Ok(())
    }
}

/// A reader and a writer over one connection.
pub(crate) struct Link {
    /// The reading side.
    pub(crate) reader: Reader,
    /// The writing side.
    pub(crate) writer: Writer,
}

/// How long a connection attempt may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Link {
    /// A TCP connection (Nagle off) with the given framing.
    pub(crate) async fn tcp(addr: SocketAddr, framing: Framing) -> Result<Link, SetupError> {
        let stream = connect_tcp(addr).await?;
        Ok(Link::from_stream(stream, framing, Vec::new()))
    }

    fn from_stream(stream: TcpStream, framing: Framing, initial: Vec<u8>) -> Link {
        let (rd, wr) = stream.into_split();
        Link {
            reader: Reader::new(ReadIo::Tcp(rd), framing, initial),
            writer: Writer::new(WriteIo::Tcp(wr), framing),
        }
    }

    /// A WebSocket connection to `path`, with extra request headers.
    pub(crate) async fn websocket(
        addr: SocketAddr,
        path: &str,
        headers: &[(String, String)],
    ) -> Result<Link, SetupError> {
        let mut stream = connect_tcp(addr).await?;
        let key = ws::new_key();
        let request = ws::upgrade_request(&addr.to_string(), path, &key, headers);
        let upgrade = async {
            stream.write_all(&request).await.map_err(SetupError::io("websocket upgrade"))?;
            let mut buf = Vec::with_capacity(1024);
            loop {
                if stream.read_buf(&mut buf).await.map_err(SetupError::io("websocket upgrade"))? == 0 {
                    return Err(SetupError::Closed { what: "websocket upgrade" });
                }
                match ws::check_response(&buf, &key) {
                    Ok(Some(head)) => return Ok(buf.split_off(head)),
                    Ok(None) => {}
                    Err(e) => {
                        let source = FrameError::Ws(e);
                        return Err(SetupError::Frame { what: "websocket upgrade", source });
                    }
                }
            }
        };
        let rest = tokio::time::timeout(CONNECT_TIMEOUT, upgrade)
            .await
            .map_err(|_| SetupError::Timeout { what: "websocket upgrade", after: CONNECT_TIMEOUT })??;
        Ok(Link::from_stream(stream, Framing::WebSocket, rest))
    }

    /// A UDP socket on 127.0.0.1 (or ::1) connected to `addr`.
    pub(crate) async fn udp(addr: SocketAddr) -> Result<Link, SetupError> {
        let local: SocketAddr =
            if addr.is_ipv4() { "127.0.0.1:0" } else { "[::1]:0" }.parse().expect("literal");
        let sock = UdpSocket::bind(local).await.map_err(SetupError::io("udp bind"))?;
        sock.connect(addr).await.map_err(SetupError::io("udp connect"))?;
        let sock = Arc::new(sock);
        Ok(Link {
            reader: Reader::new(ReadIo::Udp(sock.clone()), Framing::Datagram, Vec::new()),
            writer: Writer::new(WriteIo::Udp(sock), Framing::Datagram),
        })
    }

    /// Waits (at most `timeout`) for the next message, answering pings on the way, and returns a
    /// copy of it. For handshakes, not for the load.
    pub(crate) async fn next_message(
        &mut self,
        what: &'static str,
        timeout: Duration,
    ) -> Result<Vec<u8>, SetupError> {
        let wait = async {
            loop {
                let mut pong = None;
                match self.reader.next().map_err(|source| SetupError::Frame { what, source })? {
                    Some(Event::Message(m)) => return Ok(m.to_vec()),
                    Some(Event::Ping(p)) => pong = Some(p.to_vec()),
                    Some(Event::Close(_)) => return Err(SetupError::Closed { what }),
                    None => {}
                }
                if let Some(p) = pong {
                    self.writer.pong(&p);
                    self.writer.flush().await.map_err(SetupError::io(what))?;
                    continue;
                }
                if !self.reader.fill().await.map_err(SetupError::io(what))? {
                    return Err(SetupError::Closed { what });
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| SetupError::Timeout { what, after: timeout })?
    }
}

async fn connect_tcp(addr: SocketAddr) -> Result<TcpStream, SetupError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| SetupError::Timeout { what: "connect", after: CONNECT_TIMEOUT })?
        .map_err(SetupError::io("connect"))?;
    stream.set_nodelay(true).map_err(SetupError::io("connect"))?;
    // Closed with a reset, not a FIN: a closing generator would otherwise leave every socket
    // in TIME_WAIT for a minute, and the next scenario's connects (10,000 in an idle run) would
    // have to find ports among them, which made the connect rate of whichever broker came next
    // depend on the one before (0.3 s or 0.75 s for the same 10,000 connects).
    stream.set_zero_linger().map_err(SetupError::io("connect"))?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A hand-written server: the upgrade response, then a message in three fragments with a
    /// ping between them; the client must reassemble it and answer the ping.
    #[tokio::test]
    async fn websocket_reassembles_fragments_and_answers_pings() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut req = Vec::new();
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut b = [0u8; 1024];
                let n = sock.read(&mut b).await.unwrap();
                req.extend_from_slice(&b[..n]);
            }
            let text = String::from_utf8(req).unwrap();
            let key =
                text.lines().find_map(|l| l.strip_prefix("Sec-WebSocket-Key: ")).unwrap().trim().to_owned();
            assert!(
                text.starts_with("GET /x/y HTTP/1.1\r\n") && text.contains("Authorization: Bearer t\r\n"),
                "{text}"
            );
            let mut out = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Accept: {}\r\n\r\n",
                ws::accept_for(&key)
            )
            .into_bytes();
            out.extend_from_slice(b"\x01\x03{\"a");
            out.extend_from_slice(b"\x89\x02hi");
            out.extend_from_slice(b"\x00\x03\":1");
            out.extend_from_slice(b"\x80\x01}");
            out.extend_from_slice(b"\x81\x02{}");
            sock.write_all(&out).await.unwrap();
            // the pong: masked, opcode 0xA, payload "hi"
            let mut pong = [0u8; 8];
            sock.read_exact(&mut pong).await.unwrap();
            assert_eq!(&pong[..2], &[0x8a, 0x82]);
            let unmasked: Vec<u8> = pong[6..].iter().zip(&pong[2..6]).map(|(b, m)| b ^ m).collect();
            assert_eq!(unmasked, b"hi");
        });
        let headers = [("Authorization".to_owned(), "Bearer t".to_owned())];
        let mut link = Link::websocket(addr, "/x/y", &headers).await.unwrap();
        let mut seen = Vec::new();
        // The frames may arrive with the upgrade response, so what is buffered is taken before
        // the socket is read again.
        loop {
            while let Some(ev) = link.reader.next().unwrap() {
                match ev {
                    Event::Message(m) => seen.push(String::from_utf8(m.to_vec()).unwrap()),
                    Event::Ping(p) => {
                        seen.push(format!("ping {}", String::from_utf8_lossy(p)));
                        link.writer.pong(p);
                    }
                    Event::Close(_) => panic!("closed"),
                }
            }
            if link.writer.has_pending() {
                link.writer.flush().await.unwrap();
            }
            if seen.len() >= 3 {
                break;
            }
            let filled = tokio::time::timeout(Duration::from_secs(10), link.reader.fill()).await;
            assert!(filled.expect("the server's frames within 10 s").unwrap());
        }
        assert_eq!(seen, ["ping hi", "{\"a\":1}", "{}"]);
        tokio::time::timeout(Duration::from_secs(10), server).await.expect("the pong within 10 s").unwrap();
    }

    #[tokio::test]
    async fn length_prefixed_frames_over_the_limit_are_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut out = 2u32.to_be_bytes().to_vec();
            out.extend_from_slice(b"{}");
            out.extend_from_slice(&(RELAY_MAX_FRAME as u32 + 1).to_be_bytes());
            sock.write_all(&out).await.unwrap();
            let _ = sock.read(&mut [0u8; 1]).await;
        });
        let mut link = Link::tcp(addr, Framing::Length32).await.unwrap();
        while link.reader.buf.len() < 10 {
            assert!(link.reader.fill().await.unwrap());
        }
        assert_eq!(link.reader.next(), Ok(Some(Event::Message(b"{}"))));
        assert_eq!(
            link.reader.next(),
            Err(FrameError::TooLarge { len: RELAY_MAX_FRAME + 1, max: RELAY_MAX_FRAME })
        );
    }
}
