//! eBPF programs (compiled from `bpf/*.bpf.c` by `build.rs`) and their
//! loader. aya is the loader: pure Rust, no libbpf at run time, and it reads
//! the BTF map definitions clang emits.
//!
//! Callers that can fall back (reuseport steering -> classic BPF, XDP
//! software RSS -> RPS, AF_XDP -> AF_PACKET) turn an [`EbpfError`] into a
//! one-line reason; nothing here changes mode silently.

use thiserror::Error;

pub mod reuseport;

mod objects {
    include!(concat!(env!("OUT_DIR"), "/bpf_objects.rs"));
}

/// Why an eBPF program could not be had.
#[derive(Debug, Error)]
pub enum EbpfError {
    /// No program of that name was compiled into this build.
    #[error("no eBPF program named {0:?} in this build")]
    Unknown(String),
    /// The crate was built without clang, so no program was compiled.
    #[error("rsskit was built without clang: eBPF program {0:?} is not available (install clang and libbpf-dev, then rebuild)")]
    NotBuilt(String),
    /// The kernel (or aya) refused the object: no `CAP_BPF`/root, a kernel
    /// without the program or map type, or a verifier rejection.
    #[error("loading eBPF program {name:?}: {source}")]
    Load {
        /// The program's name.
        name: String,
        /// What aya or the kernel said.
        #[source]
        source: Box<aya::EbpfError>,
    },
}

/// The compiled object for `name` (the file `bpf/NAME.bpf.c`).
pub fn object(name: &str) -> Result<&'static [u8], EbpfError> {
    let (_, bytes) = objects::OBJECTS
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| EbpfError::Unknown(name.to_owned()))?;
    if bytes.is_empty() {
        return Err(EbpfError::NotBuilt(name.to_owned()));
    }
    Ok(bytes)
}

/// Names of every program compiled into this build.
pub fn names() -> impl Iterator<Item = &'static str> {
    objects::OBJECTS.iter().map(|(n, _)| *n)
}

/// Loads `name` into the kernel with `loader` (set globals on it first);
/// maps are created, programs still have to be loaded and attached by name.
pub fn load_with(name: &str, loader: &mut aya::EbpfLoader<'_>) -> Result<aya::Ebpf, EbpfError> {
    let bytes = object(name)?;
    loader.load(bytes).map_err(|e| EbpfError::Load { name: name.to_owned(), source: Box::new(e) })
}

/// [`load_with`] with default loader settings.
pub fn load(name: &str) -> Result<aya::Ebpf, EbpfError> {
    load_with(name, &mut aya::EbpfLoader::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_program_is_named() {
        let e = object("no-such-program").unwrap_err();
        assert!(e.to_string().contains("no-such-program"), "{e}");
    }

    /// The whole toolchain: clang built it, aya parses it, the verifier
    /// accepts it. Needs root (CAP_BPF); fails loudly otherwise.
    #[test]
    #[cfg_attr(rsskit_no_clang, ignore = "built without clang: no eBPF objects")]
    fn selftest_program_loads_and_verifies() {
        assert!(names().any(|n| n == "selftest"));
        let mut bpf = load("selftest").expect("load selftest object");
        let prog: &mut aya::programs::Xdp = bpf
            .program_mut("rsskit_selftest")
            .expect("program in object")
            .try_into()
            .expect("an XDP program");
        prog.load().expect("kernel verifier accepts the selftest program (needs root)");
    }
}
