//! Fuzz the `apply PLAN.json` reader (`Plan::from_json`): any text. Must
//! never panic or allocate without bound; what it accepts names kernel-valid
//! interface names and CPU numbers below MAX_CPUS, so the masks and lists
//! `apply` formats from it stay small, and it round-trips through JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_linux::cpulist::{self, MAX_CPUS};
use rsskit_linux::netdev::{format_hex_mask, valid_name};
use rsskit_host::plan::Plan;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let Ok(plan) = Plan::from_json(s) else { return };
    for d in &plan.devices {
        assert!(valid_name(&d.name), "{:?}", d.name);
        let sets = d
            .rx
            .iter()
            .map(|q| &q.rps_cpus)
            .chain(d.tx.iter().filter_map(|q| q.xps_cpus.as_ref()))
            .chain(d.irqs.iter().map(|x| &x.cpus));
        for cpus in sets {
            assert!(cpus.iter().all(|&c| c < MAX_CPUS));
            // A mask of at most MAX_CPUS bits: 256 words of 9 characters.
            assert!(format_hex_mask(cpus).len() <= MAX_CPUS / 32 * 9);
            let _ = cpulist::format(cpus);
        }
    }
    let text = serde_json::to_string(&plan).unwrap();
    assert_eq!(Plan::from_json(&text).as_ref(), Ok(&plan));
});
