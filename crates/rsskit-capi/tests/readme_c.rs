//! The commands of the C example in docs/library.md, run exactly as written from the
//! repository root: build the static library, compile the example, start the
//! server. The server runs in a network namespace of its own (only its
//! loopback: port 9000 cannot clash with anything else on the machine), and
//! one datagram sent there comes back echoed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The lines of the code block in docs/library.md that compiles `udp_echo.c`.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("docs/library.md")).unwrap();
    let mut blocks = readme.split("```sh\n").skip(1).map(|b| b.split("```").next().unwrap());
    let block = blocks
        .find(|b| b.contains("examples/udp_echo.c"))
        .expect("docs/library.md has a ```sh block compiling crates/rsskit-capi/examples/udp_echo.c");
    block.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect()
}

#[test]
fn readme_c_example_runs_as_written() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        panic!("needs root: the server runs in a network namespace of its own (unshare -n)");
    }
    let commands = readme_commands();
    let [build, compile, serve] = commands.as_slice() else {
        panic!("want 3 commands (build, cc, run) in the C block of docs/library.md, got {commands:?}")
    };
    for line in [build, compile] {
        let st = Command::new("bash").args(["-euc", line]).current_dir(repo()).status().unwrap();
        assert!(st.success(), "docs/library.md command failed: {line}");
    }
    // The server line as written, inside `unshare -n` with loopback up.
    let mut server = Command::new("unshare")
        .args(["-n", "bash", "-euc", &format!("ip link set lo up; exec {serve}")])
        .current_dir(repo())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux)");
    let killer = KillOnDrop(server.id());
    let mut first = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("listening on 127.0.0.1:9000"), "server said {first:?}");
    // A datagram from inside the server's namespace; bash's /dev/udp connects.
    let reply = Command::new("nsenter")
        .arg(format!("--net=/proc/{}/ns/net", server.id()))
        .args(["bash", "-euc", "exec 3<>/dev/udp/127.0.0.1/9000; printf ping >&3; timeout 5 head -c 4 <&3"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&reply.stdout), "ping", "no echo: {reply:?}");
    drop(killer);
    let _ = server.wait();
}

struct KillOnDrop(u32);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of the child this test spawned and has not reaped yet.
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}
