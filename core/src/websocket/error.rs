//! How a client's frames break RFC 6455, and the close status each answer carries.

/// A client's frames are not valid WebSocket framing (RFC 6455, section 5) for a server that
/// negotiated no extension; the connection must be closed with [`WsError::close_code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WsError {
    /// RSV1, RSV2 or RSV3 is set, but no extension was negotiated.
    #[error("a reserved bit is set (RSV bits {0:#05b}) but no extension was negotiated")]
    ReservedBits(u8),
    /// An opcode RFC 6455 reserves (3–7, 11–15).
    #[error("opcode {0:#x} is reserved")]
    ReservedOpcode(u8),
    /// A client frame without a mask (section 5.1: every client frame is masked).
    #[error("a client frame is not masked")]
    Unmasked,
    /// A 64-bit payload length with its most significant bit set.
    #[error("the 64-bit payload length has its most significant bit set")]
    LengthOverflow,
    /// A close, ping or pong frame with more than 125 bytes of payload.
    #[error("a control frame carries {0} bytes; at most 125 are allowed")]
    ControlTooLong(u64),
    /// A close, ping or pong frame without FIN.
    #[error("a control frame is fragmented")]
    FragmentedControl,
    /// A continuation frame with no fragmented message to continue.
    #[error("a continuation frame without a message to continue")]
    UnexpectedContinuation,
    /// A new text or binary frame while a fragmented message is unfinished.
    #[error("a new message began before the fragmented one was finished")]
    ExpectedContinuation,
    /// The message (all its fragments so far, plus this frame) is over the limit.
    #[error("a message of at least {len} bytes is over the limit of {max}")]
    MessageTooLarge {
        /// The size the message reaches with this frame.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A text message that is not UTF-8.
    #[error("a text message is not UTF-8")]
    TextNotUtf8,
    /// A close frame with a one-byte payload (it is empty or starts with a two-byte status).
    #[error("a close frame has a one-byte payload")]
    CloseTooShort,
    /// A close status a peer may not send (section 7.4).
    #[error("close status {0} may not be sent by an endpoint")]
    InvalidCloseCode(u16),
    /// A close reason that is not UTF-8.
    #[error("a close reason is not UTF-8")]
    CloseReasonNotUtf8,
}

impl WsError {
    /// The close status the server answers with: 1009 (message too big) for an oversized
    /// message, 1007 (invalid payload data) for text that is not UTF-8, 1002 (protocol error)
    /// for everything else.
    pub fn close_code(&self) -> u16 {
        match self {
            WsError::MessageTooLarge { .. } => 1009,
            WsError::TextNotUtf8 | WsError::CloseReasonNotUtf8 => 1007,
            _ => 1002,
        }
    }
}
