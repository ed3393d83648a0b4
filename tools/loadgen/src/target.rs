//! Where the generator may connect and listen: the loopback interface only.
//!
//! A load generator pointed at a real network by mistake is a flood. Every address given on the
//! command line goes through [`loopback`], which accepts `127.0.0.0/8`, `::1` (also as an
//! IPv4-mapped address) and the name `localhost`, and refuses everything else before a socket is
//! opened.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Why an address was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum AddrError {
    /// The text is not `IP:PORT`, `[IPv6]:PORT` or `localhost:PORT`.
    #[error("`{0}` is not an address of the form 127.0.0.1:PORT, [::1]:PORT or localhost:PORT")]
    Syntax(String),
    /// The address is outside the loopback interface.
    #[error("`{0}` is not a loopback address: the load generator only talks to 127.0.0.0/8 and ::1")]
    NotLoopback(String),
    /// Port 0 names no listener.
    #[error("`{0}` has port 0, which names no listener")]
    PortZero(String),
}

/// Parses `text` as a loopback socket address. `localhost:PORT` means `127.0.0.1:PORT`; no other
/// name is resolved.
pub(crate) fn loopback(text: &str) -> Result<SocketAddr, AddrError> {
    let addr = match text.strip_prefix("localhost:") {
        Some(port) => {
            let port: u16 = port.parse().map_err(|_| AddrError::Syntax(text.to_owned()))?;
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
        }
        None => text.parse::<SocketAddr>().map_err(|_| AddrError::Syntax(text.to_owned()))?,
    };
    if !addr.ip().to_canonical().is_loopback() {
        return Err(AddrError::NotLoopback(text.to_owned()));
    }
    if addr.port() == 0 {
        return Err(AddrError::PortZero(text.to_owned()));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_loopback_only() {
        let ok = [
            ("127.0.0.1:1883", "127.0.0.1:1883"),
            ("127.1.2.3:80", "127.1.2.3:80"),
            ("[::1]:1883", "[::1]:1883"),
            ("[::ffff:127.0.0.1]:1883", "[::ffff:127.0.0.1]:1883"),
            ("localhost:29885", "127.0.0.1:29885"),
        ];
        for (text, want) in ok {
            assert_eq!(loopback(text).map(|a| a.to_string()), Ok(want.to_owned()), "{text}");
        }
        let refused = [
            ("10.0.0.1:1883", AddrError::NotLoopback("10.0.0.1:1883".into())),
            ("0.0.0.0:1883", AddrError::NotLoopback("0.0.0.0:1883".into())),
            ("[::]:1883", AddrError::NotLoopback("[::]:1883".into())),
            ("[::ffff:10.0.0.1]:1883", AddrError::NotLoopback("[::ffff:10.0.0.1]:1883".into())),
            ("192.168.1.10:1883", AddrError::NotLoopback("192.168.1.10:1883".into())),
            ("example.com:1883", AddrError::Syntax("example.com:1883".into())),
            ("127.0.0.1", AddrError::Syntax("127.0.0.1".into())),
            ("localhost:http", AddrError::Syntax("localhost:http".into())),
            ("localhost:70000", AddrError::Syntax("localhost:70000".into())),
            ("", AddrError::Syntax(String::new())),
            ("127.0.0.1:0", AddrError::PortZero("127.0.0.1:0".into())),
        ];
        for (text, want) in refused {
            assert_eq!(loopback(text), Err(want), "{text}");
        }
    }

    #[test]
    fn messages_name_the_address() {
        let e = loopback("10.1.1.1:9").unwrap_err().to_string();
        assert!(e.contains("10.1.1.1:9") && e.contains("loopback"), "{e}");
    }
}
