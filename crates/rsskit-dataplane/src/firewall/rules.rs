//! The rule language: an ipfw-like text format, parsed into [`Rules`].
//!
//! One rule per line; `#` starts a comment; blank lines are ignored.
//!
//! ```text
//! [NUM] check-state
//! [NUM] allow|deny PROTO from SRC [[port] PORTS] to DST [[port] PORTS] [OPTIONS]
//! [NUM] redirect tcp|udp ADDR:PORT -> NEWADDR:NEWPORT [in|out]
//! default allow|deny
//! ```
//!
//! - `NUM` is 1..=65534; a rule without a number gets the previous rule's
//!   number plus 100 (ipfw's auto-increment). Rules are evaluated in
//!   ascending number order, rules with the same number in file order.
//! - `allow` also accepts `pass`, `accept`, `permit`; `deny` also `drop`.
//! - `PROTO`: `ip` or `all` (any), `tcp`, `udp`, `icmp` (ICMP and ICMPv6),
//!   or a protocol number 0..=255.
//! - `SRC`/`DST`: `any`, `me` (the configured local addresses), an IPv4 or
//!   IPv6 address, or a CIDR `ADDR/LEN`.
//! - `PORTS`: `80`, `1000-2000`, or a comma list `80,443,8000-8080`; the
//!   optional `port` keyword may precede it. Only TCP and UDP packets match a
//!   rule with ports.
//! - `OPTIONS`: `in`, `out`, `setup` (TCP SYN without ACK; TCP rules only),
//!   `keep-state`, `limit KEY... N` with keys `src-addr`, `dst-addr`,
//!   `src-port`, `dst-port` (at least one; `limit` implies `keep-state`).
//!   `keep-state` and `limit` need `allow`.
//! - `redirect`: packets to `ADDR:PORT` are rewritten to `NEWADDR:NEWPORT`
//!   and the replies back (IPv6 as `[ADDR]:PORT`). A redirect keeps state.
//! - `default allow|deny` sets the default rule (65535); deny unless set.
//!
//! The example of Qiao's "Improving the DragonFlyBSD Network Stack" is
//! valid as written:
//!
//! ```text
//! check-state
//! allow tcp from any to me 80 setup keep-state
//! ```
//!
//! Errors name the line and column (both 1-based, columns in characters)
//! and what was expected, see [`ParseError`]. Besides syntax, these are
//! errors: an option given twice (`keep-state keep-state`), a rule whose
//! source and destination are of different address families (it could never
//! match), `me` when no local address is defined ([`ParseOptions`]), and a
//! file that is not UTF-8 ([`parse_bytes`]).

use core::fmt;
use core::net::IpAddr;

/// Most rules a file may hold (a larger file is refused at the first rule
/// past it, so memory stays bounded however long the file is).
pub const MAX_RULES: usize = 65536;

/// Highest number a rule may carry; 65535 is the default rule.
pub const MAX_RULE_NUMBER: u16 = 65534;
/// Number of the default rule.
pub const DEFAULT_RULE_NUMBER: u16 = 65535;

/// Protocol selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// Every protocol.
    Any,
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// ICMP over IPv4 and ICMPv6 over IPv6.
    Icmp,
    /// This IP protocol number.
    Num(u8),
}

impl Proto {
    /// Whether this selector matches IP protocol `p`.
    #[inline]
    pub fn matches(self, p: u8) -> bool {
        match self {
            Proto::Any => true,
            Proto::Tcp => p == 6,
            Proto::Udp => p == 17,
            Proto::Icmp => p == 1 || p == 58,
            Proto::Num(n) => p == n,
        }
    }
}

/// Address selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrSpec {
    /// Every address.
    Any,
    /// One of the addresses `me` stands for.
    Me,
    /// `addr/prefix` (a plain address is a /32 or /128); `addr` is masked.
    Net {
        /// The network, masked to `prefix`.
        addr: IpAddr,
        /// Prefix length.
        prefix: u8,
    },
}

impl AddrSpec {
    /// Whether `a` is in this set; `me` is the local address list.
    #[inline]
    pub fn matches(&self, a: IpAddr, me: &[IpAddr]) -> bool {
        match *self {
            AddrSpec::Any => true,
            AddrSpec::Me => me.contains(&a),
            AddrSpec::Net { addr, prefix } => in_net(a, addr, prefix),
        }
    }
}

fn in_net(a: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            u32::from(a) & m == u32::from(n)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            u128::from(a) & m == u128::from(n)
        }
        _ => false,
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// Port ranges (inclusive); empty means any port.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSpec(pub Vec<(u16, u16)>);

impl PortSpec {
    /// Whether no port restriction is set.
    pub fn is_any(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `p` is in one of the ranges.
    #[inline]
    pub fn matches(&self, p: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| lo <= p && p <= hi)
    }
}

/// Packet direction: `in` (received) or `out` (sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Received.
    In,
    /// Sent.
    Out,
}

/// Fields a `limit` counts states by (bit set).
pub mod limit_key {
    /// Count by source address.
    pub const SRC_ADDR: u8 = 1;
    /// Count by destination address.
    pub const DST_ADDR: u8 = 2;
    /// Count by source port.
    pub const SRC_PORT: u8 = 4;
    /// Count by destination port.
    pub const DST_PORT: u8 = 8;
}

/// `limit KEYS N`: at most `max` states per distinct value of `keys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Bit set of [`limit_key`] values.
    pub keys: u8,
    /// Most states per distinct value.
    pub max: u32,
}

/// `redirect`: traffic for `from` goes to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect {
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// Address and port the clients use.
    pub from: (IpAddr, u16),
    /// Address and port the traffic goes to.
    pub to: (IpAddr, u16),
}

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Look the packet's flow up in the states.
    CheckState,
    /// Pass the packet (and install a state with `keep-state`/`limit`).
    Allow,
    /// Drop the packet.
    Deny,
    /// Translate the flow and pass it (a master/slave state pair).
    Redirect(Redirect),
}

/// One parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Rule number (ipfw's; rules are walked in order).
    pub number: u16,
    /// Source line (1-based).
    pub line: u32,
    /// What a match does.
    pub action: Action,
    /// Protocol selector.
    pub proto: Proto,
    /// Source selector.
    pub src: AddrSpec,
    /// Source ports.
    pub src_ports: PortSpec,
    /// Destination selector.
    pub dst: AddrSpec,
    /// Destination ports.
    pub dst_ports: PortSpec,
    /// Only this direction, if given.
    pub dir: Option<Dir>,
    /// `setup`: only TCP SYN without ACK.
    pub setup: bool,
    /// `keep-state`: a match installs a state.
    pub keep_state: bool,
    /// `limit`: a match installs a state, at most N per key.
    pub limit: Option<Limit>,
    /// The rule's text (trimmed, without the comment).
    pub text: String,
}

impl Rule {
    fn new(number: u16, line: u32, action: Action, text: &str) -> Self {
        Rule {
            number,
            line,
            action,
            proto: Proto::Any,
            src: AddrSpec::Any,
            src_ports: PortSpec::default(),
            dst: AddrSpec::Any,
            dst_ports: PortSpec::default(),
            dir: None,
            setup: false,
            keep_state: false,
            limit: None,
            text: text.to_string(),
        }
    }

    /// Whether matching this rule installs a state.
    pub fn creates_state(&self) -> bool {
        self.keep_state || self.limit.is_some() || matches!(self.action, Action::Redirect(_))
    }
}

/// A parsed rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// In evaluation order (ascending number, file order for ties).
    pub rules: Vec<Rule>,
    /// The default rule's action: `true` allow, `false` deny.
    pub default_allow: bool,
}

/// What went wrong, one variant per class of error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not a rule number, or outside 1..=65534.
    BadNumber,
    /// Unknown action word.
    UnknownAction,
    /// Unknown protocol name or number > 255.
    BadProto,
    /// A required keyword (`from`, `to`, `->`) is missing.
    MissingKeyword,
    /// Not `any`, `me`, an address or a CIDR.
    BadAddress,
    /// CIDR prefix longer than the address.
    BadPrefix,
    /// Not a port number 0..=65535.
    BadPort,
    /// A range whose start is above its end.
    BadPortRange,
    /// Unknown option word.
    UnknownOption,
    /// `limit` without a key or with a bad count.
    BadLimit,
    /// Options that do not go together (`setup` on non-TCP, `keep-state` on deny,
    /// ports on a protocol without ports, `in` and `out`...).
    Conflict,
    /// Something after a complete rule.
    TrailingInput,
    /// A second `default` line.
    DuplicateDefault,
    /// `redirect` to or from a bad endpoint (protocol, families).
    BadRedirect,
    /// An option given twice (`keep-state keep-state`, `setup setup`, two `limit`s).
    DuplicateOption,
    /// Source and destination addresses of different families: never matches.
    MixedFamilies,
    /// `me` while no local address is defined ([`ParseOptions::me_defined`]).
    MeUndefined,
    /// The file is not UTF-8 text.
    NotUtf8,
    /// More than [`MAX_RULES`] rules.
    TooManyRules,
}

/// What a rule file may rely on besides its own text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// Whether `me` stands for at least one address (`--me`). When false, a
    /// rule naming `me` is an error: it would silently never match.
    pub me_defined: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions { me_defined: true }
    }
}

/// A parse error at `line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Line (1-based).
    pub line: u32,
    /// Column (1-based).
    pub column: u32,
    /// What is wrong.
    pub kind: ErrorKind,
    /// What the parser wanted there.
    pub expected: String,
    /// What it found (`end of line` at the end).
    pub found: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: expected {}, found {}",
            self.line, self.column, self.expected, self.found
        )
    }
}

impl std::error::Error for ParseError {}

#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    s: &'a str,
    col: u32,
}

struct Line<'a> {
    no: u32,
    me_defined: bool,
    toks: Vec<Tok<'a>>,
    pos: usize,
    end_col: u32,
}

impl<'a> Line<'a> {
    fn new(no: u32, text: &'a str) -> Self {
        let mut toks = Vec::new();
        let mut start: Option<usize> = None;
        let col_of = |byte: usize| text[..byte].chars().count() as u32 + 1;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() {
                if let Some(s) = start.take() {
                    toks.push(Tok { s: &text[s..i], col: col_of(s) });
                }
            } else if start.is_none() {
                start = Some(i);
            }
        }
        if let Some(s) = start {
            toks.push(Tok { s: &text[s..], col: col_of(s) });
        }
        let end_col = text.trim_end().chars().count() as u32 + 1;
        Line { no, me_defined: true, toks, pos: 0, end_col }
    }

    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<Tok<'a>> {
        let t = self.peek();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn err_at(&self, t: Option<Tok<'_>>, kind: ErrorKind, expected: &str) -> ParseError {
        let (column, found) = match t {
            Some(t) => (t.col, format!("'{}'", t.s)),
            None => (self.end_col, "end of line".to_string()),
        };
        ParseError { line: self.no, column, kind, expected: expected.to_string(), found }
    }

    /// Error at the current token.
    fn err(&self, kind: ErrorKind, expected: &str) -> ParseError {
        self.err_at(self.peek(), kind, expected)
    }

    fn expect(&mut self, word: &str, expected: &str) -> Result<(), ParseError> {
        match self.peek() {
            Some(t) if t.s.eq_ignore_ascii_case(word) => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.err(ErrorKind::MissingKeyword, expected)),
        }
    }
}

/// Parses a rule file, `me` allowed (see [`parse_with`]).
pub fn parse(text: &str) -> Result<Rules, ParseError> {
    parse_with(text, ParseOptions::default())
}

/// Parses a rule file read as bytes: text that is not UTF-8 is an error at
/// the line and column of the first bad byte.
pub fn parse_bytes(bytes: &[u8], opts: ParseOptions) -> Result<Rules, ParseError> {
    match core::str::from_utf8(bytes) {
        Ok(text) => parse_with(text, opts),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            // `good` is valid UTF-8 by construction.
            let good = core::str::from_utf8(good).unwrap_or("");
            let line = good.matches('\n').count() + 1;
            let last = good.rsplit('\n').next().unwrap_or("");
            Err(ParseError {
                line: u32::try_from(line).unwrap_or(u32::MAX),
                column: u32::try_from(last.chars().count() + 1).unwrap_or(u32::MAX),
                kind: ErrorKind::NotUtf8,
                expected: "UTF-8 text".to_string(),
                found: format!("byte 0x{:02x}", bytes[e.valid_up_to()]),
            })
        }
    }
}

/// Parses a rule file with `opts`.
pub fn parse_with(text: &str, opts: ParseOptions) -> Result<Rules, ParseError> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut default_allow: Option<bool> = None;
    let mut last_number: u16 = 0;
    for (i, raw) in text.lines().enumerate() {
        let no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let body = raw.split('#').next().unwrap_or("");
        let mut l = Line::new(no, body);
        l.me_defined = opts.me_defined;
        let Some(first) = l.peek() else { continue };
        if rules.len() == MAX_RULES && !first.s.eq_ignore_ascii_case("default") {
            return Err(l.err_at(Some(first), ErrorKind::TooManyRules, "at most 65536 rules in a file"));
        }
        if first.s.eq_ignore_ascii_case("default") {
            l.next();
            let t = l.next();
            let allow = match t.map(|t| t.s.to_ascii_lowercase()) {
                Some(w) if is_allow(&w) => true,
                Some(w) if is_deny(&w) => false,
                _ => return Err(l.err_at(t, ErrorKind::UnknownAction, "'allow' or 'deny' after 'default'")),
            };
            if default_allow.is_some() {
                return Err(l.err_at(Some(first), ErrorKind::DuplicateDefault, "at most one 'default' line"));
            }
            if l.peek().is_some() {
                return Err(l.err(ErrorKind::TrailingInput, "end of line after the default action"));
            }
            default_allow = Some(allow);
            continue;
        }
        let number = if first.s.as_bytes()[0].is_ascii_digit() {
            l.next();
            match first.s.parse::<u32>() {
                Ok(n) if (1..=u32::from(MAX_RULE_NUMBER)).contains(&n) => n as u16,
                _ => {
                    return Err(l.err_at(Some(first), ErrorKind::BadNumber, "a rule number from 1 to 65534"));
                }
            }
        } else {
            let n = u32::from(last_number) + 100;
            if n > u32::from(MAX_RULE_NUMBER) {
                return Err(l.err_at(
                    Some(first),
                    ErrorKind::BadNumber,
                    "an explicit rule number (auto-numbering passed 65534)",
                ));
            }
            n as u16
        };
        last_number = number;
        let rule = parse_rule(&mut l, number, body.trim())?;
        if l.peek().is_some() {
            return Err(l.err(ErrorKind::TrailingInput, "end of rule"));
        }
        rules.push(rule);
    }
    // Stable: equal numbers keep file order.
    rules.sort_by_key(|r| r.number);
    Ok(Rules { rules, default_allow: default_allow.unwrap_or(false) })
}

fn is_allow(w: &str) -> bool {
    matches!(w, "allow" | "pass" | "accept" | "permit")
}

fn is_deny(w: &str) -> bool {
    matches!(w, "deny" | "drop")
}

fn parse_rule(l: &mut Line<'_>, number: u16, text: &str) -> Result<Rule, ParseError> {
    let t = l.next();
    let word = t.map(|t| t.s.to_ascii_lowercase()).unwrap_or_default();
    let action = if is_allow(&word) {
        Action::Allow
    } else if is_deny(&word) {
        Action::Deny
    } else if word == "check-state" {
        return Ok(Rule::new(number, l.no, Action::CheckState, text));
    } else if word == "redirect" {
        return parse_redirect(l, number, text);
    } else {
        return Err(l.err_at(t, ErrorKind::UnknownAction, "'check-state', 'allow', 'deny' or 'redirect'"));
    };
    let mut r = Rule::new(number, l.no, action, text);
    let pt = l.peek();
    r.proto = parse_proto(l)?;
    let has_ports = matches!(r.proto, Proto::Tcp | Proto::Udp);
    l.expect("from", "'from'")?;
    r.src = parse_addr(l)?;
    r.src_ports = parse_ports_opt(l)?;
    l.expect("to", "'to' or a port")?;
    let dt = l.peek();
    r.dst = parse_addr(l)?;
    if let (AddrSpec::Net { addr: s, .. }, AddrSpec::Net { addr: d, .. }) = (r.src, r.dst) {
        if s.is_ipv4() != d.is_ipv4() {
            let fam = if s.is_ipv4() { "IPv4" } else { "IPv6" };
            return Err(l.err_at(
                dt,
                ErrorKind::MixedFamilies,
                &format!("a destination of the source's family ({fam}): this rule could never match"),
            ));
        }
    }
    r.dst_ports = parse_ports_opt(l)?;
    if (!r.src_ports.is_any() || !r.dst_ports.is_any()) && !has_ports {
        return Err(l.err_at(pt, ErrorKind::Conflict, "'tcp' or 'udp' for a rule with ports"));
    }
    let mut seen: Vec<String> = Vec::new();
    while let Some(t) = l.peek() {
        let w = t.s.to_ascii_lowercase();
        if matches!(w.as_str(), "setup" | "keep-state" | "limit") {
            if seen.contains(&w) {
                return Err(l.err_at(
                    Some(t),
                    ErrorKind::DuplicateOption,
                    &format!("each option at most once ('{w}' was already given)"),
                ));
            }
            seen.push(w.clone());
        }
        match w.as_str() {
            "in" | "out" => {
                l.next();
                if r.dir.is_some() {
                    return Err(l.err_at(Some(t), ErrorKind::Conflict, "at most one of 'in' and 'out'"));
                }
                r.dir = Some(if w == "in" { Dir::In } else { Dir::Out });
            }
            "setup" => {
                l.next();
                if r.proto != Proto::Tcp {
                    return Err(l.err_at(Some(t), ErrorKind::Conflict, "'setup' only in a 'tcp' rule"));
                }
                r.setup = true;
            }
            "keep-state" => {
                l.next();
                if r.action != Action::Allow {
                    return Err(l.err_at(
                        Some(t),
                        ErrorKind::Conflict,
                        "'keep-state' only in an 'allow' rule",
                    ));
                }
                r.keep_state = true;
            }
            "limit" => {
                l.next();
                if r.action != Action::Allow {
                    return Err(l.err_at(Some(t), ErrorKind::Conflict, "'limit' only in an 'allow' rule"));
                }
                r.limit = Some(parse_limit(l)?);
            }
            _ => {
                return Err(l.err(
                    ErrorKind::UnknownOption,
                    "an option ('in', 'out', 'setup', 'keep-state', 'limit') or end of rule",
                ))
            }
        }
    }
    Ok(r)
}

fn parse_proto(l: &mut Line<'_>) -> Result<Proto, ParseError> {
    let t = l.next();
    let Some(tok) = t else {
        return Err(l.err_at(t, ErrorKind::BadProto, "a protocol ('ip', 'tcp', 'udp', 'icmp' or a number)"));
    };
    Ok(match tok.s.to_ascii_lowercase().as_str() {
        "ip" | "all" | "any" => Proto::Any,
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" | "icmp6" | "ipv6-icmp" => Proto::Icmp,
        s => match s.parse::<u8>() {
            Ok(6) => Proto::Tcp,
            Ok(17) => Proto::Udp,
            Ok(n) => Proto::Num(n),
            Err(_) => {
                return Err(l.err_at(
                    t,
                    ErrorKind::BadProto,
                    "a protocol ('ip', 'tcp', 'udp', 'icmp' or 0..255)",
                ))
            }
        },
    })
}

fn parse_addr(l: &mut Line<'_>) -> Result<AddrSpec, ParseError> {
    let t = l.next();
    let expected = "an address ('any', 'me', an IP address or ADDR/LEN)";
    let Some(tok) = t else { return Err(l.err_at(t, ErrorKind::BadAddress, expected)) };
    let s = tok.s;
    if s.eq_ignore_ascii_case("any") {
        return Ok(AddrSpec::Any);
    }
    if s.eq_ignore_ascii_case("me") || s.eq_ignore_ascii_case("me6") {
        if !l.me_defined {
            return Err(l.err_at(
                t,
                ErrorKind::MeUndefined,
                "'any' or an address ('me' stands for no address: the firewall was given none of its own)",
            ));
        }
        return Ok(AddrSpec::Me);
    }
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| l.err_at(t, ErrorKind::BadAddress, expected))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match p {
        None => max,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => {
                let col = tok.col + a.chars().count() as u32 + 1;
                return Err(ParseError {
                    line: l.no,
                    column: col,
                    kind: ErrorKind::BadPrefix,
                    expected: format!("a prefix length from 0 to {max}"),
                    found: format!("'{p}'"),
                });
            }
        },
    };
    Ok(AddrSpec::Net { addr: mask(addr, prefix), prefix })
}

/// Optional `[port] PORTS` after an address.
fn parse_ports_opt(l: &mut Line<'_>) -> Result<PortSpec, ParseError> {
    let Some(t) = l.peek() else { return Ok(PortSpec::default()) };
    if t.s.eq_ignore_ascii_case("port") {
        l.next();
        let Some(t) = l.next() else {
            return Err(l.err_at(None, ErrorKind::BadPort, "a port, range or list after 'port'"));
        };
        return parse_port_list(l.no, t);
    }
    if t.s.as_bytes()[0].is_ascii_digit() {
        l.next();
        return parse_port_list(l.no, t);
    }
    Ok(PortSpec::default())
}

fn parse_port_list(line: u32, t: Tok<'_>) -> Result<PortSpec, ParseError> {
    let mut v = Vec::new();
    let mut col = t.col;
    for item in t.s.split(',') {
        let err = |kind, expected: &str, col: u32, found: &str| ParseError {
            line,
            column: col,
            kind,
            expected: expected.to_string(),
            found: if found.is_empty() { "nothing".to_string() } else { format!("'{found}'") },
        };
        let port = |s: &str, col: u32| {
            s.parse::<u16>().map_err(|_| err(ErrorKind::BadPort, "a port number from 0 to 65535", col, s))
        };
        let range = match item.split_once('-') {
            Some((a, b)) => {
                let lo = port(a, col)?;
                let hi = port(b, col + a.chars().count() as u32 + 1)?;
                if lo > hi {
                    return Err(err(ErrorKind::BadPortRange, "a range LOW-HIGH with LOW <= HIGH", col, item));
                }
                (lo, hi)
            }
            None => {
                let p = port(item, col)?;
                (p, p)
            }
        };
        v.push(range);
        col += item.chars().count() as u32 + 1;
    }
    Ok(PortSpec(v))
}

fn parse_limit(l: &mut Line<'_>) -> Result<Limit, ParseError> {
    let mut keys = 0u8;
    loop {
        let t = l.peek();
        let k = match t.map(|t| t.s.to_ascii_lowercase()) {
            Some(w) if w == "src-addr" => limit_key::SRC_ADDR,
            Some(w) if w == "dst-addr" => limit_key::DST_ADDR,
            Some(w) if w == "src-port" => limit_key::SRC_PORT,
            Some(w) if w == "dst-port" => limit_key::DST_PORT,
            _ => break,
        };
        l.next();
        keys |= k;
    }
    if keys == 0 {
        return Err(
            l.err(ErrorKind::BadLimit, "a limit key ('src-addr', 'dst-addr', 'src-port', 'dst-port')")
        );
    }
    let t = l.next();
    match t.and_then(|t| t.s.parse::<u32>().ok()) {
        Some(n) if n >= 1 => Ok(Limit { keys, max: n }),
        _ => Err(l.err_at(t, ErrorKind::BadLimit, "a limit key or a state count >= 1")),
    }
}

fn parse_endpoint(l: &mut Line<'_>, what: &str) -> Result<(IpAddr, u16), ParseError> {
    let t = l.next();
    let expected = format!("{what} as ADDR:PORT (IPv6: [ADDR]:PORT)");
    let Some(tok) = t else { return Err(l.err_at(t, ErrorKind::BadRedirect, &expected)) };
    let s = tok.s;
    let (a, p) = if let Some(rest) = s.strip_prefix('[') {
        match rest.split_once("]:") {
            Some((a, p)) => (a, p),
            None => return Err(l.err_at(t, ErrorKind::BadRedirect, &expected)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((a, p)) if !a.contains(':') => (a, p),
            _ => return Err(l.err_at(t, ErrorKind::BadRedirect, &expected)),
        }
    };
    let addr: IpAddr = a.parse().map_err(|_| l.err_at(t, ErrorKind::BadAddress, &expected))?;
    let pcol = tok.col + s.chars().count() as u32 - p.chars().count() as u32;
    let port = p.parse::<u16>().map_err(|_| ParseError {
        line: l.no,
        column: pcol,
        kind: ErrorKind::BadPort,
        expected: "a port number from 0 to 65535".to_string(),
        found: format!("'{p}'"),
    })?;
    Ok((addr, port))
}

fn parse_redirect(l: &mut Line<'_>, number: u16, text: &str) -> Result<Rule, ParseError> {
    let t = l.peek();
    let proto = match parse_proto(l)? {
        Proto::Tcp => 6,
        Proto::Udp => 17,
        _ => return Err(l.err_at(t, ErrorKind::BadRedirect, "'tcp' or 'udp' after 'redirect'")),
    };
    let from = parse_endpoint(l, "the original destination")?;
    l.expect("->", "'->'")?;
    let tt = l.peek();
    let to = parse_endpoint(l, "the new destination")?;
    if from.0.is_ipv4() != to.0.is_ipv4() {
        return Err(l.err_at(tt, ErrorKind::BadRedirect, "a new destination of the same address family"));
    }
    let mut r = Rule::new(number, l.no, Action::Redirect(Redirect { proto, from, to }), text);
    r.proto = if proto == 6 { Proto::Tcp } else { Proto::Udp };
    r.dst = AddrSpec::Net { addr: from.0, prefix: if from.0.is_ipv4() { 32 } else { 128 } };
    r.dst_ports = PortSpec(vec![(from.1, from.1)]);
    if let Some(t) = l.peek() {
        let w = t.s.to_ascii_lowercase();
        if w == "in" || w == "out" {
            l.next();
            r.dir = Some(if w == "in" { Dir::In } else { Dir::Out });
        }
    }
    Ok(r)
}
