//! Client-chosen text in log lines, bounded.
//!
//! A client id, a username or a relay address may be up to 64 KiB long, and the broker logs
//! them with every line about the client (a connection's span carries its client id). Written
//! whole, one client could make each of those lines 64 KiB long and fill an operator's disk,
//! or block a broker whose log goes to a pipe nobody drains fast enough.

use std::fmt;

/// The longest client-chosen text a log line shows, in bytes.
pub const SHOWN: usize = 128;

/// Shows at most [`SHOWN`] bytes of `text` (cut at a character boundary), then how many bytes
/// were left out: `aaaa…(+64872 bytes)`.
#[derive(Clone, Copy, Debug)]
pub struct Clipped<'a>(pub &'a str);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= SHOWN {
            return f.write_str(self.0);
        }
        let mut cut = SHOWN;
        while !self.0.is_char_boundary(cut) {
            cut -= 1;
        }
        write!(f, "{}…(+{} bytes)", &self.0[..cut], self.0.len() - cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_shown_whole_and_long_text_is_cut_at_a_character() {
        assert_eq!(Clipped("device-1").to_string(), "device-1");
        let exact = "a".repeat(SHOWN);
        assert_eq!(Clipped(&exact).to_string(), exact);
        let long = "a".repeat(65_000);
        assert_eq!(Clipped(&long).to_string(), format!("{}…(+{} bytes)", "a".repeat(SHOWN), 65_000 - SHOWN));
        // A two-byte character across the limit is left out whole.
        let straddling = format!("{}é{}", "a".repeat(SHOWN - 1), "b".repeat(10));
        assert_eq!(Clipped(&straddling).to_string(), format!("{}…(+12 bytes)", "a".repeat(SHOWN - 1)));
    }
}
