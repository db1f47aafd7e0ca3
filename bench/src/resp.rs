//! Just enough RESP for the raw load drivers: encode commands into a buffer
//! and count the replies that arrived, without allocating per reply.

/// Appends one command in RESP array form.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_decimal(out, args.len() as u64);
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        push_decimal(out, arg.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends the decimal digits of `n`.
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// What kind of reply a parsed item was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// `:n`; the value.
    Integer(i64),
    /// `+…` or a non-nil bulk string.
    Text,
    /// `$-1`, `*-1` or RESP3 `_`.
    Nil,
    /// `-…`.
    Error,
}

/// Parses one reply at the start of `buf`: its kind and length in bytes, or
/// `None` when it is not complete yet. Aggregates are not expected here and
/// parse as an error spanning their header line.
pub fn parse_one(buf: &[u8]) -> Option<(ReplyKind, usize)> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = &buf[1..line_end];
    let after_line = line_end + 2;
    let kind = match buf.first()? {
        b':' => ReplyKind::Integer(parse_i64(line).unwrap_or(i64::MIN)),
        b'+' => ReplyKind::Text,
        b'-' => ReplyKind::Error,
        b'_' => ReplyKind::Nil,
        b'$' => {
            let len = parse_i64(line).unwrap_or(-1);
            if len < 0 {
                ReplyKind::Nil
            } else {
                let end = after_line + len as usize + 2;
                if buf.len() < end {
                    return None;
                }
                return Some((ReplyKind::Text, end));
            }
        }
        b'*' if parse_i64(line) == Some(-1) => ReplyKind::Nil,
        _ => ReplyKind::Error,
    };
    Some((kind, after_line))
}

fn parse_i64(digits: &[u8]) -> Option<i64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"k", b"v"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    }

    #[test]
    fn parses_replies_and_waits_for_incomplete_ones() {
        assert_eq!(parse_one(b":42\r\n+OK"), Some((ReplyKind::Integer(42), 5)));
        assert_eq!(parse_one(b"+OK\r\n"), Some((ReplyKind::Text, 5)));
        assert_eq!(parse_one(b"$-1\r\n"), Some((ReplyKind::Nil, 5)));
        assert_eq!(parse_one(b"$3\r\nabc\r\n"), Some((ReplyKind::Text, 9)));
        assert_eq!(parse_one(b"$3\r\nab"), None);
        assert_eq!(parse_one(b"-ERR x\r\n"), Some((ReplyKind::Error, 8)));
        assert_eq!(parse_one(b":4"), None);
    }
}
