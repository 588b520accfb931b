//! Fuzz the decoder of a NIC's flow classification rule
//! (`rsskit_linux::ethtool::rxnfc::decode_rule`, the bytes a driver
//! answers to `ETHTOOL_GRXCLSRULE`): any bytes. Must never panic; what it
//! accepts encodes back to bytes that decode to the same rule, its text
//! (what `info` prints) reads back to it, and the
//! rule model answers for it (`classify` on a fixed flow) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_core::flowrule::{classify, context_queue, parse_rule, Classified};
use rsskit_core::{FlowTuple, L4Proto};
use rsskit_linux::ethtool::rxnfc::{decode_rule, encode_rule, ETHTOOL_SRXCLSRLINS};

fuzz_target!(|data: &[u8]| {
    if let Ok(rule) = decode_rule(data) {
        let again = decode_rule(&encode_rule(ETHTOOL_SRXCLSRLINS, &rule));
        assert_eq!(again.as_ref(), Ok(&rule));
        // The text `info` prints reads back to the same rule.
        assert_eq!(parse_rule(&rule.to_string()), Ok(rule), "{rule}");
        let flow = FlowTuple::new([10, 0, 0, 1].into(), 1234, [10, 0, 0, 2].into(), 443, L4Proto::Udp);
        let rules = [rule];
        if let Classified::Rule(r) = classify(&rules, &flow) {
            assert_eq!(r, &rule);
        }
        let _ = context_queue(&[0, 1, 2, 3], 0xdead_beef, u32::MAX);
    }
});
