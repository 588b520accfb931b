use super::*;

pub(crate) fn dev(table: &[u32], cpus: &[usize]) -> DevicePlan {
    let rx: Vec<serde_json::Value> = cpus
        .iter()
        .enumerate()
        .map(|(q, c)| serde_json::json!({"queue": q, "cpu": c, "rps_cpus": []}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "name": "eth0", "cpus": cpus, "unit": 0, "hardware_rss": true, "grid": 1,
        "rx": rx, "tx": [], "irqs": [], "table": table, "key_source": "keep",
        "steering": {"mode": "x", "cpus": [], "reason": ""}, "notes": []
    }))
    .unwrap()
}

fn ok() -> IsolationSupport {
    IsolationSupport::default()
}

#[test]
fn specs_read_as_written() {
    let s = parse_spec("udp:443=8-9").unwrap();
    assert_eq!(s.cpus, vec![8, 9]);
    let words: Vec<String> = s.matchers.iter().map(match_words).collect();
    assert_eq!(words, vec!["udp4 dst-port 443", "udp6 dst-port 443"]);
    let s = parse_spec("ip4 dst-ip 10.0.0.0/24=4").unwrap();
    assert_eq!(s.matchers.iter().map(match_words).collect::<Vec<_>>(), vec!["ip4 dst-ip 10.0.0.0/24"]);
    for (bad, says) in [
        ("udp:443", "no '=CPUS'"),
        ("udp:70000=1", "port"),
        ("icmp:1=1", "protocol"),
        ("udp:443=x", "CPUS"),
        ("udp4 dst-port 443 queue 3=1", "action"),
        ("udp4 dst-port nope=1", "match"),
    ] {
        let e = parse_spec(bad).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("isolate"), "{bad}: {e}");
    }
}

// Queues 0-3 on CPUs 0-3; QUIC on CPUs 2-3 takes queues 2 and 3.
#[test]
fn the_context_takes_the_cpus_queues_and_the_main_table_leaves_them() {
    let mut d = dev(&[0, 1, 2, 3, 0, 1, 2, 3], &[0, 1, 2, 3]);
    isolate_device(&mut d, &[parse_spec("udp4:443=2,3").unwrap()], &ok()).unwrap();
    let iso = &d.isolation[0];
    assert_eq!(iso.queues, vec![2, 3]);
    assert_eq!(iso.table, vec![2, 3, 2, 3, 2, 3, 2, 3]);
    assert_eq!(iso.rules, vec!["udp4 dst-port 443"]);
    // Entries 2, 3, 6, 7 (queues 2, 3) go to queues 0, 1, 0, 1 in turn.
    assert_eq!(d.table.as_deref(), Some(&[0, 1, 0, 1, 0, 1, 0, 1][..]));
    let r = iso.rules_into(5).unwrap();
    assert_eq!(r[0].action, RuleAction::Context { context: 5, offset: 0 });
    assert_eq!(iso.validate(&d), Ok(()));
}

#[test]
fn refusals_name_the_reason() {
    let spec = |s: &str| parse_spec(s).unwrap();
    let base = dev(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    let no_ctx = IsolationSupport { no_contexts: Some("ETHTOOL_GRSSH: not supported".into()), ..ok() };
    let e = isolate_device(&mut base.clone(), &[spec("udp:443=2")], &no_ctx).unwrap_err().to_string();
    assert!(e.contains("no RSS contexts") && e.contains("eth0"), "{e}");
    let no_rules = IsolationSupport { no_rules: Some("off".into()), ..ok() };
    let e = isolate_device(&mut base.clone(), &[spec("udp:443=2")], &no_rules).unwrap_err().to_string();
    assert!(e.contains("no flow rules"), "{e}");
    let e = isolate_device(&mut base.clone(), &[spec("udp:443=8-9")], &ok()).unwrap_err().to_string();
    assert!(e.contains("CPUs 8-9 serve no RX queue") && e.contains("0-3"), "{e}");
    let e = isolate_device(&mut base.clone(), &[spec("udp:443=2"), spec("tcp:80=2-3")], &ok())
        .unwrap_err()
        .to_string();
    assert!(e.contains("overlap") && e.contains("udp:443=2"), "{e}");
    let e = isolate_device(&mut base.clone(), &[spec("udp:443=0-1"), spec("tcp:80=2-3")], &ok())
        .unwrap_err()
        .to_string();
    assert!(e.contains("main table would be empty"), "{e}");
    let mut d = base.clone();
    isolate_device(&mut d, &[spec("udp:443=0-1"), spec("tcp:80=2")], &ok()).unwrap();
    assert_eq!(d.table.as_deref(), Some(&[3, 3, 3, 3][..]));
}

#[test]
fn what_rsskit_made_is_told_from_what_others_made() {
    let ours = parse_rule("udp4 dst-port 443 context 1 loc 1022").unwrap();
    let other = parse_rule("udp4 dst-port 53 context 1 loc 1022").unwrap();
    assert_eq!(judge_rule(&ours, Some(&ours)), Found::Ours);
    assert_eq!(judge_rule(&ours, None), Found::Gone);
    assert!(matches!(judge_rule(&ours, Some(&other)), Found::Foreign(w) if w.contains("dst-port 53")));
    assert_eq!(judge_context(&[2, 3], &[1], Some((&[2, 3], &[1]))), Found::Ours);
    assert!(matches!(judge_context(&[2, 3], &[1], Some((&[2, 2], &[1]))), Found::Foreign(_)));
    assert_eq!(judge_context(&[2, 3], &[1], None), Found::Gone);
}
