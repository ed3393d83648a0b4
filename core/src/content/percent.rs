//! Percent-decoding of listener paths as they arrive in a request URL.
//!
//! A WebSocket upgrade to `/room=lobby%20one` registers the path `/room=lobby one`. The whole
//! path is decoded before it is split, so `%2F`, `%3D` and `%2A` act exactly like `/`, `=` and
//! `*`: an encoded path means what its decoded text means, and a value can never smuggle a
//! separator. `+` is an ordinary character in a URL path (it means a space only in a query).

use std::borrow::Cow;

use super::path::PathError;

/// Decodes `%XX` escapes; the result must be UTF-8.
pub(crate) fn percent_decode(input: &str) -> Result<Cow<'_, str>, PathError> {
    if !input.contains('%') {
        return Ok(Cow::Borrowed(input));
    }
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let hi = bytes.get(i + 1).copied().and_then(hex_digit);
        let lo = bytes.get(i + 2).copied().and_then(hex_digit);
        match (hi, lo) {
            (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
            _ => {
                let end = (i + 3).min(bytes.len());
                return Err(PathError::InvalidPercentEncoding {
                    offset: i,
                    escape: String::from_utf8_lossy(&bytes[i..end]).into_owned(),
                });
            }
        }
        i += 3;
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|e| PathError::NotUtf8 { offset: e.utf8_error().valid_up_to() })
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_of_either_case() {
        assert_eq!(percent_decode("/room=lobby%20one").unwrap(), "/room=lobby one");
        assert_eq!(percent_decode("/k=%e2%82%AC").unwrap(), "/k=€");
        assert_eq!(percent_decode("/a%3Db").unwrap(), "/a=b");
        assert_eq!(percent_decode("/a+b").unwrap(), "/a+b");
        assert!(matches!(percent_decode("/plain").unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn refuses_broken_escapes_and_non_utf8() {
        for (input, offset) in [("/a=%", 3), ("/a=%4", 3), ("/a=%zz", 3), ("/%g0", 1), ("/x%2", 2)] {
            match percent_decode(input) {
                Err(PathError::InvalidPercentEncoding { offset: o, .. }) => assert_eq!(o, offset, "{input}"),
                other => panic!("{input}: {other:?}"),
            }
        }
        assert!(matches!(percent_decode("/a=%ff"), Err(PathError::NotUtf8 { offset: 3 })));
        assert!(matches!(percent_decode("/a=%C3"), Err(PathError::NotUtf8 { offset: 3 })));
    }
}
