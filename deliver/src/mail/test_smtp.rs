//! A tiny SMTP server on 127.0.0.1 for the tests: enough of RFC 5321 for lettre (EHLO/HELO, MAIL,
//! RCPT, DATA with dot-unstuffing, RSET, NOOP, QUIT), with failure modes. Each connection is served on
//! its own thread; everything stops when the [`Sink`] is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Accepts every message.
    Accept,
    /// Accepts the connection and never says anything.
    Hang,
    /// `550` to every RCPT.
    RejectRcpt,
    /// `451` after the message data.
    TempFailData,
}

#[derive(Debug, Clone)]
pub struct Received {
    pub helo: String,
    pub from: String,
    pub to: Vec<String>,
    /// The message as sent, CRLF line ends, dot-unstuffed, without the final `.` line.
    pub data: Vec<u8>,
}

struct Shared {
    stop: AtomicBool,
    mode: Mutex<Mode>,
    /// Pause before answering the end of DATA (to make concurrent senders overlap).
    data_delay: Mutex<Duration>,
    received: Mutex<Vec<Received>>,
    connections: Mutex<usize>,
}

pub struct Sink {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Sink {
    pub fn start(mode: Mode) -> Sink {
        Self::start_on(0, mode).expect("bind 127.0.0.1:0")
    }

    /// Listens on 127.0.0.1:`port` (0: any free port).
    pub fn start_on(port: u16, mode: Mode) -> std::io::Result<Sink> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            mode: Mutex::new(mode),
            data_delay: Mutex::new(Duration::ZERO),
            received: Mutex::new(Vec::new()),
            connections: Mutex::new(0),
        });
        let sh = shared.clone();
        let acceptor = std::thread::spawn(move || {
            let mut conns = Vec::new();
            while !sh.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        *sh.connections.lock().unwrap() += 1;
                        let sh2 = sh.clone();
                        conns.push(std::thread::spawn(move || serve(stream, &sh2)));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
        });
        Ok(Sink {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// A loopback port with nothing listening (bound, then released).
    pub fn closed_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn messages(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        *self.shared.connections.lock().unwrap()
    }

    pub fn set_data_delay(&self, d: Duration) {
        *self.shared.data_delay.lock().unwrap() = d;
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

/// Reads one CRLF-terminated line (without the CRLF), polling `stop`. `None`: closed or stopping.
fn read_line(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool) -> Option<Vec<u8>> {
    loop {
        if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf[..i].to_vec();
            buf.drain(..i + 2);
            return Some(line);
        }
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let mut chunk = [0u8; 8192];
        match s.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    }
}

/// The address inside `MAIL FROM:<a> …` / `RCPT TO:<a>`.
fn angle(arg: &str) -> String {
    match (arg.find('<'), arg.find('>')) {
        (Some(a), Some(b)) if a < b => arg[a + 1..b].to_string(),
        _ => arg.trim().to_string(),
    }
}

fn serve(mut s: TcpStream, sh: &Shared) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mode = *sh.mode.lock().unwrap();
    if mode == Mode::Hang {
        // Hold the connection open, say nothing, until the sink stops.
        while !sh.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        return;
    }
    let mut w = s.try_clone().expect("clone stream");
    let mut say = |t: &str| w.write_all(t.as_bytes()).is_ok();
    if !say("220 sink ESMTP test\r\n") {
        return;
    }
    let mut buf = Vec::new();
    let (mut helo, mut from, mut to) = (String::new(), String::new(), Vec::<String>::new());
    while let Some(line) = read_line(&mut s, &mut buf, &sh.stop) {
        let line = String::from_utf8_lossy(&line).to_string();
        let upper = line.to_ascii_uppercase();
        let ok = if upper.starts_with("EHLO") {
            helo = line[4..].trim().to_string();
            say("250-sink\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
        } else if upper.starts_with("HELO") {
            helo = line[4..].trim().to_string();
            say("250 sink\r\n")
        } else if upper.starts_with("MAIL FROM:") {
            from = angle(&line[10..]);
            to.clear();
            say("250 ok\r\n")
        } else if upper.starts_with("RCPT TO:") {
            if mode == Mode::RejectRcpt {
                say("550 5.1.1 no such user\r\n")
            } else {
                to.push(angle(&line[8..]));
                say("250 ok\r\n")
            }
        } else if upper == "DATA" {
            if !say("354 go ahead\r\n") {
                return;
            }
            let mut data = Vec::new();
            loop {
                let Some(l) = read_line(&mut s, &mut buf, &sh.stop) else {
                    return;
                };
                if l == b"." {
                    break;
                }
                let l = if l.starts_with(b".") { &l[1..] } else { &l[..] };
                data.extend_from_slice(l);
                data.extend_from_slice(b"\r\n");
            }
            let delay = *sh.data_delay.lock().unwrap();
            std::thread::sleep(delay);
            if mode == Mode::TempFailData {
                say("451 4.3.0 try later\r\n")
            } else {
                sh.received.lock().unwrap().push(Received {
                    helo: helo.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    data,
                });
                say("250 queued\r\n")
            }
        } else if upper == "RSET" {
            from.clear();
            to.clear();
            say("250 ok\r\n")
        } else if upper == "NOOP" {
            say("250 ok\r\n")
        } else if upper == "QUIT" {
            let _ = say("221 bye\r\n");
            return;
        } else {
            say("502 not implemented\r\n")
        };
        if !ok {
            return;
        }
    }
}
