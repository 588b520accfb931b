//! `scripts/install-deps.sh` must not touch a nginx it did not start (it
//! used to run `pkill -x nginx` after any install). The script runs here
//! with a PATH of stubs: `apt-get`, `systemctl`, `pkill`, `killall` only log
//! their arguments (nothing is installed, stopped or killed), `id` says
//! root, and the policy-rc.d path points into a temp dir.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Stubs {
    dir: PathBuf,
}

impl Stubs {
    fn new(name: &str) -> Stubs {
        let dir = std::env::temp_dir().join(format!("rsskit-install-deps-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("bin")).unwrap();
        let script = |n: &str, body: &str| {
            let p = dir.join("bin").join(n);
            fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        };
        script("id", "echo 0");
        // apt-get install also records what the policy answers for a service start then.
        script(
            "apt-get",
            "echo \"apt-get $*\" >>\"$STUB_LOG\"\n\
             case \"$*\" in *install*) if [ -x \"$RSSKIT_POLICY_RC_D\" ]; then \"$RSSKIT_POLICY_RC_D\" nginx start; \
             echo \"policy answered $?\" >>\"$STUB_LOG\"; else echo 'no policy' >>\"$STUB_LOG\"; fi;; esac",
        );
        for n in ["systemctl", "pkill", "killall", "service"] {
            script(n, &format!("echo \"{n} $*\" >>\"$STUB_LOG\""));
        }
        // The few real tools the script itself uses.
        for n in ["chmod", "rm"] {
            let real =
                ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(n)).find(|p| p.exists()).unwrap();
            std::os::unix::fs::symlink(real, dir.join("bin").join(n)).unwrap();
        }
        Stubs { dir }
    }

    fn policy(&self) -> PathBuf {
        self.dir.join("policy-rc.d")
    }

    /// Runs the script; returns its log of stub calls.
    fn run(&self) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-deps.sh");
        let log = self.dir.join("log");
        let out = Command::new("/bin/bash")
            .arg(script)
            .env_clear()
            .env("PATH", self.dir.join("bin"))
            .env("STUB_LOG", &log)
            .env("RSSKIT_POLICY_RC_D", self.policy())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        fs::read_to_string(log).unwrap_or_default()
    }
}

impl Drop for Stubs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn assert_kills_nothing(log: &str) {
    for bad in ["pkill", "killall", "service "] {
        assert!(!log.lines().any(|l| l.starts_with(bad)), "the script ran {bad}:\n{log}");
    }
}

#[test]
fn install_forbids_service_starts_and_kills_nothing() {
    let s = Stubs::new("own");
    let log = s.run();
    // `ip` and `clang` are not on the stub PATH: something is installed.
    assert!(log.contains("apt-get install"), "{log}");
    assert!(log.contains("policy answered 101"), "services could start during the install:\n{log}");
    assert_kills_nothing(&log);
    assert!(!log.contains("systemctl stop"), "no service started, none to stop:\n{log}");
    assert!(!s.policy().exists() && !s.policy().is_symlink(), "its own policy-rc.d is removed afterwards");
}

#[test]
fn an_existing_policy_is_kept_and_only_the_nginx_unit_may_be_stopped() {
    let s = Stubs::new("theirs");
    let theirs = "#!/bin/sh\nexit 0\n";
    fs::write(s.policy(), theirs).unwrap();
    fs::set_permissions(s.policy(), fs::Permissions::from_mode(0o755)).unwrap();
    let log = s.run();
    assert!(log.contains("apt-get install"), "{log}");
    assert!(log.contains("policy answered 0"), "the admin's policy is used as it is:\n{log}");
    assert_eq!(fs::read_to_string(s.policy()).unwrap(), theirs, "the admin's policy-rc.d is untouched");
    assert_kills_nothing(&log);
    for l in log.lines().filter(|l| l.starts_with("systemctl")) {
        assert_eq!(l, "systemctl stop nginx.service", "only the unit the install started:\n{log}");
    }
}
