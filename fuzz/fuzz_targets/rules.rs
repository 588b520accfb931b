//! Fuzz the firewall rule parser: any text. Must never panic; a parsed set
//! keeps its bounds (count, numbers, port ranges, evaluation order), each
//! rule's own text parses back to the same rule, and the compiled rule set
//! can be built from it. An error points inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_dataplane::firewall::rules::{parse, Action, MAX_RULES, MAX_RULE_NUMBER};
use rsskit_dataplane::firewall::ruleset::RuleSet;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count() as u32;
    match parse(&text) {
        Ok(r) => {
            assert!(r.rules.len() <= MAX_RULES);
            let mut prev = 0u16;
            for rule in &r.rules {
                assert!((1..=MAX_RULE_NUMBER).contains(&rule.number));
                assert!(rule.number >= prev, "not in evaluation order");
                prev = rule.number;
                assert!(rule.line >= 1 && rule.line <= lines);
                for &(lo, hi) in rule.src_ports.0.iter().chain(&rule.dst_ports.0) {
                    assert!(lo <= hi);
                }
                if let Action::Redirect(rd) = rule.action {
                    assert!(rd.proto == 6 || rd.proto == 17);
                }
                // The rule's text alone is the same rule (bar its line).
                let again = parse(&rule.text).expect("a parsed rule's text parses");
                assert_eq!(again.rules.len(), 1);
                let mut a = again.rules[0].clone();
                a.line = rule.line;
                if rule.text.as_bytes()[0].is_ascii_digit() {
                    assert_eq!(&a, rule);
                } else {
                    a.number = rule.number;
                    assert_eq!(&a, rule);
                }
            }
            let n = r.rules.len();
            let set = RuleSet::new(r, vec!["10.0.0.1".parse().unwrap()], 2, 1);
            assert_eq!(set.default_index(), n);
            for (i, rule) in set.rules.iter().enumerate() {
                let first = set.index_of(rule.number).expect("every number is found");
                assert!(first <= i && set.rules[first].number == rule.number);
                assert!(set.index_after(rule.number) > i);
            }
        }
        Err(e) => {
            assert!(e.line >= 1 && e.line <= lines.max(1), "{e}");
            assert!(!e.expected.is_empty());
        }
    }
});
