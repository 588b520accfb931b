//! `rsskit agent` on a real device: a 4-queue veth with a MAC set by the
//! test (its stable identity), in a network namespace the test creates
//! (needs root and `ip`; fails loudly without). `apply --persist` stores the
//! plan under a temporary root; the agent, started in the namespace with
//! `NOTIFY_SOCKET` pointing at the test, says READY=1, puts back RPS and XPS
//! values the test changes behind its back (logging the cause), counts them
//! in /metrics, and re-applies the plan when the veth is deleted and created
//! again with the same MAC (seen through rtnetlink). Nothing outside the
//! namespace and the temporary root is written.

mod common;

use common::proc::output_text as out;

use common::agent::{get_in_netns, promtool_check, sample, Agent};
use common::netns::{require_root_and_ip, rsskit, unique, Netns, TempDir};
use std::process::Output;
use std::time::Duration;

const QUEUES: &str = "4";
const MAC: &str = "02:72:73:6b:00:01";

#[test]
fn agent_puts_back_rps_xps_and_reapplies_on_a_recreated_veth() {
    require_root_and_ip();
    assert!(
        rsskit_linux::cpulist::online().len() > 1,
        "needs 2+ CPUs: RPS/XPS over one CPU cannot drift visibly"
    );
    let ns = Netns::new("rsag");
    let (a, b) = (unique("va"), unique("vb"));
    ns.veth_with_mac(&a, &b, MAC, QUEUES);
    let dir = TempDir(std::env::temp_dir().join(format!("rsskit-agent-netns-{}", unique("d"))));
    let root = dir.0.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let run = |args: &[&str]| -> Output {
        let mut c = ns.command(&rsskit());
        c.current_dir(&dir.0).args(args);
        common::netns::Proc::spawn(c).wait(Duration::from_secs(60))
    };
    let roots = root.display().to_string();

    let o = run(&["plan", "--iface", &a, "--json"]);
    assert!(o.status.success(), "{}", out(&o));
    std::fs::write(dir.0.join("plan.json"), &o.stdout).unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let nums = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
    };
    let rps_plan = nums(&plan["devices"][0]["rx"][1]["rps_cpus"]);
    let xps_plan = nums(&plan["devices"][0]["tx"][0]["xps_cpus"]);
    assert!(!rps_plan.is_empty() && !xps_plan.is_empty(), "RPS and XPS planned on: {plan}");

    let o = run(&["apply", "plan.json", "--save", "saved.json", "--persist", "--root", &roots]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains(&format!("Persisted the plan of {a} (MAC {MAC} (set by the administrator))")),
        "{}",
        out(&o)
    );

    // The agent, as systemd would run it (Type=notify).
    let notify_path = dir.0.join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut c = ns.command(&rsskit());
    c.args(["agent", "--root", &roots, "--interval", "2", "--metrics", "127.0.0.1:0"])
        .env("NOTIFY_SOCKET", &notify_path);
    let agent = Agent::spawn(c);
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 on NOTIFY_SOCKET within 30 s");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"), "{}", String::from_utf8_lossy(&buf[..n]));
    let (_, l) = agent.wait_for(0, &["metrics at http://"], Duration::from_secs(10));
    let addr = l.split("http://").nth(1).unwrap().trim_end_matches("/metrics").to_string();
    agent.wait_for(0, &["ready: re-checking every 2.0 s and on link events"], Duration::from_secs(10));

    // Behind its back.
    let rps = format!("/sys/class/net/{a}/queues/rx-1/rps_cpus");
    let xps = format!("/sys/class/net/{a}/queues/tx-0/xps_cpus");
    let n0 = agent.lines();
    ns.write(&rps, "0");
    ns.write(&xps, "0");
    agent.wait_for(
        n0,
        &[&format!("{a}: corrected rx-1 rps_cpus: "), "(cause: found by the periodic re-check)"],
        Duration::from_secs(20),
    );
    agent.wait_for(
        n0,
        &[&format!("{a}: corrected tx-0 xps_cpus: "), "(cause: found by the periodic re-check)"],
        Duration::from_secs(20),
    );
    assert_eq!(ns.mask(&rps), rps_plan);
    assert_eq!(ns.mask(&xps), xps_plan);
    let (status, body) = get_in_netns(&ns.name, &addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let counter = |body: &str, setting: &str, cause: &str| {
        sample(
            body,
            &format!("rsskit_corrections_total{{device=\"{a}\",setting=\"{setting}\",cause=\"{cause}\"}}"),
        )
    };
    assert_eq!(counter(&body, "rps_cpus", "periodic"), Some(1.0), "{body}");
    assert_eq!(counter(&body, "xps_cpus", "periodic"), Some(1.0), "{body}");
    assert_eq!(sample(&body, &format!("rsskit_device_aligned{{device=\"{a}\"}}")), Some(1.0), "{body}");
    let (ok, why) = promtool_check(&body);
    assert!(ok, "promtool check metrics: {why}\n{body}");

    let st = agent.stop();
    assert!(st.success(), "{st:?}");

    // Link events alone: an agent whose periodic check never comes (600 s).
    let mut c = ns.command(&rsskit());
    c.args(["agent", "--root", &roots, "--interval", "600", "--metrics", "127.0.0.1:0"]);
    let agent = Agent::spawn(c);
    let (_, l) = agent.wait_for(0, &["metrics at http://"], Duration::from_secs(10));
    let addr = l.split("http://").nth(1).unwrap().trim_end_matches("/metrics").to_string();
    agent.wait_for(0, &["ready: re-checking every 600.0 s and on link events"], Duration::from_secs(10));
    // Down, changed, up: put back because the link came up.
    let n1 = agent.lines();
    ns.ip(&["link", "set", &a, "down"]);
    ns.write(&rps, "0");
    ns.ip(&["link", "set", &a, "up"]);
    agent.wait_for(
        n1,
        &[&format!("{a}: corrected rx-1 rps_cpus: "), "(cause: the link came up)"],
        Duration::from_secs(20),
    );
    assert_eq!(ns.mask(&rps), rps_plan);

    // Deleted and created again with the same MAC: rtnetlink says so, the plan goes back on.
    let n1 = agent.lines();
    ns.ip(&["link", "del", &a]);
    ns.veth_with_mac(&a, &b, MAC, QUEUES);
    agent.wait_for(
        n1,
        &[&format!("{a}: corrected rx-1 rps_cpus: "), "(cause: the device appeared (new link))"],
        Duration::from_secs(20),
    );
    assert!(
        common::netns::wait_until(Duration::from_secs(20), || (0..4)
            .all(|q| !ns.mask(&format!("/sys/class/net/{a}/queues/rx-{q}/rps_cpus")).is_empty())),
        "RPS back on every queue of the new veth; log:\n{}",
        agent.text()
    );
    assert_eq!(ns.mask(&rps), rps_plan);
    assert_eq!(ns.mask(&xps), xps_plan);
    let (_, body) = get_in_netns(&ns.name, &addr, "/metrics");
    assert!(counter(&body, "rps_cpus", "new_link").unwrap_or(0.0) >= 1.0, "{body}");
    assert_eq!(counter(&body, "rps_cpus", "link_up"), Some(1.0), "{body}");
    assert_eq!(counter(&body, "rps_cpus", "periodic"), None, "no periodic check ran: {body}");
    let o = run(&["check", "--iface", &a]);
    assert_eq!(o.status.code(), Some(0), "check says aligned after the re-application: {}", out(&o));

    let st = agent.stop();
    assert!(st.success(), "{st:?}");
}
