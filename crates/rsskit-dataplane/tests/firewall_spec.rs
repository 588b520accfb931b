//! `firewall::FirewallSpec` (what `rsskit firewall` runs) over the crafted
//! captures: both engines give the same per-rule counters, every frame is
//! accounted for, and an input the firewall cannot read is refused.

use rsskit_dataplane::firewall::order::Order;
use rsskit_dataplane::firewall::{
    parse, symmetric_policy, Config, Engine, Firewall, FirewallOutcome, FirewallSpec,
};
use rsskit_dataplane::io::spec::{InSpec, OutSpec, SpecError};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/firewall")
}

fn run(name: &str, engine: Engine) -> FirewallOutcome {
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join(format!("{name}.json"))).unwrap()).unwrap();
    let cfg = Config {
        policy: symmetric_policy(j["workers"].as_u64().unwrap() as usize),
        states_max: j["states_max"].as_u64().unwrap(),
        me: j["me"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().parse().unwrap()).collect(),
        ..Config::default()
    };
    let fw = Firewall::new(cfg, parse(j["rules"].as_str().unwrap()).unwrap());
    let spec = FirewallSpec {
        input: InSpec::Pcap(dir().join(format!("{name}.pcap"))),
        output: OutSpec::Null,
        engine,
        order: Order::Causal,
        batch: 32,
        stop_at_bad_record: false,
        duration: None,
    };
    spec.run(&fw, &AtomicBool::new(false), None).unwrap()
}

#[test]
fn both_engines_agree_and_account_for_every_frame() {
    for name in ["basic", "deny", "limit", "redirect", "redirect_deny", "synflood"] {
        let own = run(name, Engine::Own);
        let netisr = run(name, Engine::Netisr);
        for o in [&own, &netisr] {
            assert!(o.inputs > 0, "{name}: no frame read");
            assert!(o.accounting.balanced(), "{name}: {}", o.accounting.line());
            assert!(o.input_errors.is_empty(), "{name}: {:?}", o.input_errors);
        }
        let counts =
            |o: &FirewallOutcome| o.snapshot.rules.iter().map(|r| (r.number, r.packets)).collect::<Vec<_>>();
        assert_eq!(counts(&own), counts(&netisr), "{name}: per-rule counters differ between the engines");
        assert_eq!(own.inputs, netisr.inputs, "{name}");
    }
}

#[test]
fn the_firewall_refuses_generated_input() {
    let fw = Firewall::new(Config::default(), parse("allow ip from any to any").unwrap());
    for engine in [Engine::Own, Engine::Netisr] {
        let spec = FirewallSpec {
            input: InSpec::Gen(64),
            output: OutSpec::Null,
            engine,
            order: Order::None,
            batch: 1,
            stop_at_bad_record: false,
            duration: None,
        };
        let e = spec.run(&fw, &AtomicBool::new(false), None).expect_err("gen refused");
        assert!(matches!(e, SpecError::Unsupported(_)), "{e}");
    }
}

#[test]
fn the_own_engine_refuses_af_xdp() {
    let fw = Firewall::new(Config::default(), parse("allow ip from any to any").unwrap());
    let specs = [
        (InSpec::Xdp("nosuchif0xyz".into(), None), OutSpec::Null),
        (InSpec::Pcap("/nonexistent/x.pcap".into()), OutSpec::Xdp("nosuchif0xyz".into())),
    ];
    for (input, output) in specs {
        let spec = FirewallSpec {
            input,
            output,
            engine: Engine::Own,
            order: Order::None,
            batch: 1,
            stop_at_bad_record: false,
            duration: None,
        };
        // Refused before anything opens (not the missing interface or capture).
        let e = spec.run(&fw, &AtomicBool::new(false), None).expect_err("xdp refused");
        assert!(matches!(e, SpecError::Unsupported(_)), "{e}");
        assert_eq!(e.to_string(), "xdp: input and output need the netisr engine (the default)");
    }
}
