//! Rule parser: valid rule sets and every class of error, with positions.

use rsskit_dataplane::firewall::rules::{
    limit_key, parse, parse_bytes, parse_with, Action, AddrSpec, Dir, ErrorKind, Limit, ParseError,
    ParseOptions, PortSpec, Proto, Redirect, MAX_RULES,
};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn dragonfly_paper_example_as_written() {
    let r = parse("check-state\nallow tcp from any to me 80 setup keep-state\n").unwrap();
    assert!(!r.default_allow, "default deny");
    assert_eq!(r.rules.len(), 2);
    assert_eq!(r.rules[0].action, Action::CheckState);
    assert_eq!(r.rules[0].number, 100);
    let a = &r.rules[1];
    assert_eq!(a.number, 200);
    assert_eq!(a.action, Action::Allow);
    assert_eq!(a.proto, Proto::Tcp);
    assert_eq!(a.src, AddrSpec::Any);
    assert_eq!(a.dst, AddrSpec::Me);
    assert_eq!(a.dst_ports, PortSpec(vec![(80, 80)]));
    assert!(a.setup && a.keep_state && a.limit.is_none());
    assert_eq!(a.line, 2);
    // ipfw's own form with numbers.
    let r = parse("1 check-state\nallow tcp from any to me 80 setup keep-state").unwrap();
    assert_eq!(r.rules[0].number, 1);
    assert_eq!(r.rules[1].number, 101);
}

#[test]
fn full_syntax() {
    let text = "\
# a comment line

10 allow udp from 10.0.0.0/8 port 1000-2000,3000 to me 53 in keep-state   # trailing comment
20 deny ip from any to 192.168.1.1 out
30 allow tcp from any to 2001:db8::/32 443 setup limit src-addr dst-port 5
40 redirect tcp 10.0.0.1:8080 -> 10.0.0.2:80
50 redirect udp [2001:db8::1]:53 -> [2001:db8::2]:5353 in
allow icmp from any to any
60 pass 47 from any to any
5 drop all from 1.2.3.4 to any
default allow
";
    let r = parse(text).unwrap();
    assert!(r.default_allow);
    let nums: Vec<u16> = r.rules.iter().map(|r| r.number).collect();
    assert_eq!(nums, vec![5, 10, 20, 30, 40, 50, 60, 150]);
    let u = &r.rules[1];
    assert_eq!(u.src, AddrSpec::Net { addr: ip("10.0.0.0"), prefix: 8 });
    assert_eq!(u.src_ports, PortSpec(vec![(1000, 2000), (3000, 3000)]));
    assert_eq!(u.dst_ports, PortSpec(vec![(53, 53)]));
    assert_eq!(u.dir, Some(Dir::In));
    assert!(u.keep_state);
    assert_eq!(r.rules[2].action, Action::Deny);
    assert_eq!(r.rules[2].dir, Some(Dir::Out));
    assert_eq!(r.rules[3].limit, Some(Limit { keys: limit_key::SRC_ADDR | limit_key::DST_PORT, max: 5 }));
    assert!(r.rules[3].creates_state());
    assert_eq!(
        r.rules[4].action,
        Action::Redirect(Redirect { proto: 6, from: (ip("10.0.0.1"), 8080), to: (ip("10.0.0.2"), 80) })
    );
    assert_eq!(
        r.rules[5].action,
        Action::Redirect(Redirect {
            proto: 17,
            from: (ip("2001:db8::1"), 53),
            to: (ip("2001:db8::2"), 5353)
        })
    );
    assert_eq!(r.rules[5].dir, Some(Dir::In));
    assert_eq!(r.rules[6].proto, Proto::Num(47));
    // The un-numbered icmp rule follows 50 -> 150, sorted after 60.
    assert_eq!(r.rules[7].proto, Proto::Icmp);
    // Masked CIDR: host bits dropped.
    let r = parse("allow ip from 10.1.2.3/16 to any").unwrap();
    assert_eq!(r.rules[0].src, AddrSpec::Net { addr: ip("10.1.0.0"), prefix: 16 });
    // Empty file: default deny only.
    let r = parse("\n# nothing\n").unwrap();
    assert!(r.rules.is_empty() && !r.default_allow);
}

fn err(text: &str) -> (u32, u32, ErrorKind, String) {
    let e = parse(text).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("line {}, column {}: expected ", e.line, e.column)), "{msg}");
    (e.line, e.column, e.kind, msg)
}

#[test]
fn every_error_class_with_position() {
    use ErrorKind::*;
    let cases: &[(&str, u32, u32, ErrorKind, &str)] = &[
        ("0 allow ip from any to any", 1, 1, BadNumber, "rule number"),
        ("70000 allow ip from any to any", 1, 1, BadNumber, "rule number"),
        ("check-state\n  permitt tcp from any to any", 2, 3, UnknownAction, "'allow'"),
        ("allow tcpp from any to any", 1, 7, BadProto, "protocol"),
        ("allow 256 from any to any", 1, 7, BadProto, "protocol"),
        ("allow tcp form any to any", 1, 11, MissingKeyword, "'from'"),
        ("allow tcp from any any", 1, 20, MissingKeyword, "'to'"),
        ("allow tcp from any to", 1, 22, BadAddress, "address"),
        ("allow tcp from 10.0.0.256 to any", 1, 16, BadAddress, "address"),
        ("allow tcp from 10.0.0.0/33 to any", 1, 25, BadPrefix, "prefix length from 0 to 32"),
        ("allow tcp from any to me 70000", 1, 26, BadPort, "port number"),
        ("allow tcp from any to me 80,9x", 1, 29, BadPort, "port number"),
        ("allow tcp from any to me 2000-1000", 1, 26, BadPortRange, "LOW <= HIGH"),
        ("allow tcp from any to me port", 1, 30, BadPort, "after 'port'"),
        ("allow tcp from any to me 80 keepstate", 1, 29, UnknownOption, "option"),
        ("allow tcp from any to me limit 5", 1, 32, BadLimit, "limit key"),
        ("allow tcp from any to me limit src-addr", 1, 40, BadLimit, "state count"),
        ("allow tcp from any to me limit src-addr 0", 1, 41, BadLimit, "state count"),
        ("allow udp from any to me setup", 1, 26, Conflict, "'setup' only"),
        ("deny tcp from any to me keep-state", 1, 25, Conflict, "'keep-state' only"),
        ("deny tcp from any to me limit src-addr 3", 1, 25, Conflict, "'limit' only"),
        ("allow ip from any to me 80", 1, 7, Conflict, "'tcp' or 'udp'"),
        ("allow tcp from any to me in out", 1, 29, Conflict, "at most one"),
        ("check-state now", 1, 13, TrailingInput, "end of rule"),
        ("default deny\ndefault allow", 2, 1, DuplicateDefault, "at most one"),
        ("default maybe", 1, 9, UnknownAction, "'allow' or 'deny'"),
        ("default deny please", 1, 14, TrailingInput, "end of line"),
        ("redirect icmp 1.2.3.4:1 -> 5.6.7.8:2", 1, 10, BadRedirect, "'tcp' or 'udp'"),
        ("redirect tcp 1.2.3.4 -> 5.6.7.8:2", 1, 14, BadRedirect, "ADDR:PORT"),
        ("redirect tcp 1.2.3.4:80 5.6.7.8:2", 1, 25, MissingKeyword, "'->'"),
        ("redirect tcp 1.2.3.4:80 -> [::1]:2", 1, 28, BadRedirect, "same address family"),
        ("redirect tcp 1.2.3.4:80x -> 5.6.7.8:2", 1, 22, BadPort, "port number"),
        ("redirect tcp 1.2.3.4:80 -> 5.6.7.8:2 out extra", 1, 42, TrailingInput, "end of rule"),
        (
            "allow tcp from any to me keep-state keep-state",
            1,
            37,
            DuplicateOption,
            "'keep-state' was already",
        ),
        ("allow tcp from any to me setup keep-state setup", 1, 43, DuplicateOption, "'setup' was already"),
        ("allow tcp from any to me limit src-addr 2 limit dst-port 3", 1, 43, DuplicateOption, "'limit'"),
        ("check-state\nallow ip from ::/0 to 10.0.0.0/8", 2, 23, MixedFamilies, "source's family (IPv6)"),
        ("allow udp from 10.0.0.1 53 to 2001:db8::1", 1, 31, MixedFamilies, "(IPv4)"),
    ];
    for &(text, line, col, kind, want) in cases {
        let (l, c, k, msg) = err(text);
        assert_eq!((l, c, k), (line, col, kind), "{text:?}: {msg}");
        assert!(msg.contains(want), "{text:?}: {msg} lacks {want:?}");
        assert!(msg.contains("found "), "{msg}");
    }
}

#[test]
fn end_of_line_is_named() {
    let (_, _, _, msg) = err("allow tcp from any to");
    assert!(msg.ends_with("found end of line"), "{msg}");
    let (_, _, _, msg) = err("allow tcp from any to me 80 limit src-addr bogus");
    assert!(msg.contains("found 'bogus'"), "{msg}");
}

#[test]
fn auto_numbering_overflow() {
    let mut text = String::from("65500 check-state\n");
    text.push_str("allow ip from any to any\n");
    let (l, c, k, _) = err(&text);
    assert_eq!((l, c, k), (2, 1, ErrorKind::BadNumber));
}

fn err_of(e: ParseError) -> (u32, u32, ErrorKind, String) {
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("line {}, column {}: expected ", e.line, e.column)), "{msg}");
    (e.line, e.column, e.kind, msg)
}

#[test]
fn me_needs_local_addresses() {
    let none = ParseOptions { me_defined: false };
    let (l, c, k, msg) =
        err_of(parse_with("check-state\nallow tcp from any to me 80 setup keep-state\n", none).unwrap_err());
    assert_eq!((l, c, k), (2, 23, ErrorKind::MeUndefined), "{msg}");
    // The library names no CLI flag (the CLI adds its `--me ADDR` hint).
    assert!(msg.contains("the firewall was given none of its own") && msg.contains("found 'me'"), "{msg}");
    assert!(!msg.contains("--"), "{msg}");
    let (l, c, k, _) = err_of(parse_with("allow ip from me6 to any", none).unwrap_err());
    assert_eq!((l, c, k), (1, 15, ErrorKind::MeUndefined));
    // With local addresses (and by default) `me` is fine; without, rules
    // that do not name it are too.
    assert!(parse_with("allow tcp from any to me 80", ParseOptions { me_defined: true }).is_ok());
    assert!(parse("allow tcp from any to me 80").is_ok());
    assert!(parse_with("allow tcp from any to 10.0.0.1 80", none).is_ok());
    // `any` with either family, and same-family pairs, are not mixed.
    assert!(parse("allow ip from ::/0 to any\nallow ip from 10.0.0.0/8 to 10.1.0.0/16").is_ok());
}

#[test]
fn non_utf8_file_names_the_byte() {
    let opts = ParseOptions::default();
    let mut bytes = b"check-state\nallow tcp from any to me 80 # caf".to_vec();
    bytes.extend_from_slice(&[0xe9, b'\n']); // Latin-1 e-acute
    let (l, c, k, msg) = err_of(parse_bytes(&bytes, opts).unwrap_err());
    assert_eq!((l, c, k), (2, 34, ErrorKind::NotUtf8), "{msg}");
    assert!(msg.contains("expected UTF-8 text, found byte 0xe9"), "{msg}");
    // Columns count characters: a valid multi-byte character before it.
    let mut bytes = "allow ip from any to any # \u{e9}".as_bytes().to_vec();
    bytes.push(0xff);
    let (l, c, _, _) = err_of(parse_bytes(&bytes, opts).unwrap_err());
    assert_eq!((l, c), (1, 29));
    assert_eq!(parse_bytes(b"allow ip from any to any\n", opts).unwrap().rules.len(), 1);
}

#[test]
fn rule_count_is_bounded() {
    // A million rules with one number: refused at the first rule past the
    // maximum, without building the rest.
    let one = "100 allow ip from any to any\n";
    let r = parse(&one.repeat(MAX_RULES)).unwrap();
    assert_eq!(r.rules.len(), MAX_RULES);
    assert!(r.rules.iter().all(|r| r.number == 100));
    let e = parse(&format!("{}default allow\n", one.repeat(MAX_RULES))).unwrap();
    assert!(e.default_allow, "the default line is not a rule");
    let e = parse(&one.repeat(1_000_000)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooManyRules);
    assert_eq!(e.line, MAX_RULES as u32 + 1);
    assert!(e.to_string().contains("at most 65536 rules"), "{e}");
}
