//! Classic BPF programs (built and interpreted here, attached by
//! `rsskit_linux::bpf`) that steer datagrams inside an `SO_REUSEPORT` group
//! (`SO_ATTACH_REUSEPORT_CBPF`): the program's return value is the index of
//! the socket (in bind order) that gets the datagram; an index past the last
//! socket makes the kernel fall back to its own reuseport hash.
//!
//! - [`cpu_program`]: the socket of the CPU that is processing the datagram
//!   (`ld #cpu`, the kernel selftest `reuseport_bpf_cpu` pattern);
//! - [`toeplitz_program`]: the Toeplitz hash of the datagram's addresses
//!   (and ports), computed in the kernel, masked to a bucket, looked up in a
//!   bucket -> socket table. Agrees bit for bit with
//!   [`crate::Toeplitz::hash`] over [`crate::FlowTuple::input`].
//!
//! When a reuseport program runs for UDP, `skb->data` points at the UDP
//! payload (the kernel pulls the UDP header first), so headers are read
//! with `SKF_NET_OFF`-relative loads: IPv4 addresses at net+12/net+16,
//! ports at net+IHL*4 (IHL read with `ldxb 4*([net]&0xf)`); IPv6 addresses
//! at net+8/net+24, ports at net+40 (UDP directly after the fixed header;
//! anything else falls back to the kernel's hash).
//!
//! The hash itself: the kernel only needs the bucket, the low `bits` bits
//! of the hash, and bit j of a Toeplitz hash is the parity of the input
//! ANDed with the key window that starts at bit 31 - j. So the program
//! loads the input words once into scratch memory and, per bucket bit,
//! ANDs each word with its window, XORs the words, folds the parity
//! (32 -> 1) and ORs the bit into place: branch-free, about 4 instructions
//! per input word plus 20 per bucket bit. An IPv6 4-tuple with 7 bucket
//! bits is under 450 instructions, far inside `BPF_MAXINSNS` (4096).
//!
//! This is RSS logic, not a syscall: it lives beside the policy so that
//! "kernel program == software hash" is checked here against the one
//! Toeplitz implementation, with [`interpret`] as the kernel's stand-in.

use crate::toeplitz::key_window;
use crate::{HashType, L4Proto, RssKey};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    /// Opcode (`BPF_LD | BPF_W | BPF_ABS`, ...).
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

// Opcode pieces (linux/filter.h, linux/bpf_common.h).
/// Class: load into the accumulator A.
pub const BPF_LD: u16 = 0x00;
/// Class: load into the index register X.
pub const BPF_LDX: u16 = 0x01;
/// Class: store A into scratch memory.
pub const BPF_ST: u16 = 0x02;
/// Class: store X into scratch memory.
pub const BPF_STX: u16 = 0x03;
/// Class: arithmetic or logic on A.
pub const BPF_ALU: u16 = 0x04;
/// Class: jump.
pub const BPF_JMP: u16 = 0x05;
/// Class: return.
pub const BPF_RET: u16 = 0x06;
/// Class: miscellaneous (register transfers).
pub const BPF_MISC: u16 = 0x07;
/// Size: 32-bit word.
pub const BPF_W: u16 = 0x00;
/// Size: 16-bit half word.
pub const BPF_H: u16 = 0x08;
/// Size: byte.
pub const BPF_B: u16 = 0x10;
/// Mode: immediate constant `k`.
pub const BPF_IMM: u16 = 0x00;
/// Mode: packet data at absolute offset `k`.
pub const BPF_ABS: u16 = 0x20;
/// Mode: packet data at offset `X + k`.
pub const BPF_IND: u16 = 0x40;
/// Mode: scratch memory word `k`.
pub const BPF_MEM: u16 = 0x60;
/// Mode: packet length.
pub const BPF_LEN: u16 = 0x80;
/// Mode: `4 * (byte at k & 0xf)` (IPv4 header length), into X.
pub const BPF_MSH: u16 = 0xa0;
/// ALU operation: add.
pub const BPF_ADD: u16 = 0x00;
/// ALU operation: subtract.
pub const BPF_SUB: u16 = 0x10;
/// ALU operation: multiply.
pub const BPF_MUL: u16 = 0x20;
/// ALU operation: divide.
pub const BPF_DIV: u16 = 0x30;
/// ALU operation: bitwise or.
pub const BPF_OR: u16 = 0x40;
/// ALU operation: bitwise and.
pub const BPF_AND: u16 = 0x50;
/// ALU operation: shift left.
pub const BPF_LSH: u16 = 0x60;
/// ALU operation: shift right.
pub const BPF_RSH: u16 = 0x70;
/// ALU operation: negate.
pub const BPF_NEG: u16 = 0x80;
/// ALU operation: remainder.
pub const BPF_MOD: u16 = 0x90;
/// ALU operation: bitwise exclusive or.
pub const BPF_XOR: u16 = 0xa0;
/// Jump: always, by `k`.
pub const BPF_JA: u16 = 0x00;
/// Jump: if A equals the operand.
pub const BPF_JEQ: u16 = 0x10;
/// Jump: if A is greater than the operand.
pub const BPF_JGT: u16 = 0x20;
/// Jump: if A is greater than or equal to the operand.
pub const BPF_JGE: u16 = 0x30;
/// Jump: if A AND the operand is nonzero.
pub const BPF_JSET: u16 = 0x40;
/// Source operand: the constant `k`.
pub const BPF_K: u16 = 0x00;
/// Source operand: the index register X.
pub const BPF_X: u16 = 0x08;
/// Return value: the accumulator A.
pub const BPF_A: u16 = 0x10;
/// Misc: copy A into X.
pub const BPF_TAX: u16 = 0x00;
/// Misc: copy X into A.
pub const BPF_TXA: u16 = 0x80;
/// Scratch memory words.
pub const BPF_MEMWORDS: u32 = 16;
/// Most instructions a classic program may have.
pub const BPF_MAXINSNS: usize = 4096;

/// Ancillary data base offset.
pub const SKF_AD_OFF: i32 = -0x1000;
/// Ancillary: the current CPU.
pub const SKF_AD_CPU: i32 = 36;
/// Network header relative loads.
pub const SKF_NET_OFF: i32 = -0x100000;
/// Link-layer header relative loads.
pub const SKF_LL_OFF: i32 = -0x200000;

/// Returned for "no opinion": past any socket index, so the kernel falls
/// back to its own reuseport hash.
pub const FALLBACK: u32 = u32::MAX;

/// `{ code, jt, jf, k }`.
pub const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

fn stmt(code: u16, k: u32) -> Insn {
    insn(code, 0, 0, k)
}

/// Why a program could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpfError {
    /// Table length not a power of two between 2 and 65536.
    BadTable(usize),
    /// Too many instructions.
    TooLong(usize),
    /// Key too short for the hash input.
    KeyTooShort {
        /// Key length, in bytes.
        key: usize,
        /// Hash input length, in bytes.
        input: usize,
    },
    /// No sockets.
    Empty,
    /// The NIC transforms the input first (`input_xfrm`), which the
    /// program does not compute: its buckets would not be the NIC's.
    InputXfrm(crate::InputXfrm),
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BpfError::BadTable(n) => write!(f, "bucket table of {n} entries: need a power of two, 1..=65536"),
            BpfError::TooLong(n) => write!(f, "BPF program of {n} instructions exceeds {BPF_MAXINSNS}"),
            BpfError::KeyTooShort { key, input } => {
                write!(f, "{key}-byte key is too short for a {input}-byte hash input")
            }
            BpfError::Empty => f.write_str("no sockets to steer to"),
            BpfError::InputXfrm(x) => write!(
                f,
                "the NIC hashes with input transform {x}, which the Toeplitz steering program does not compute"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BpfError {}

/// A classic BPF program.
#[derive(Clone)]
pub struct Program {
    insns: Vec<Insn>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Program ({} instructions)", self.insns.len())?;
        for (i, x) in self.insns.iter().enumerate() {
            writeln!(f, "{i:4}: {{ 0x{:02x}, {}, {}, 0x{:08x} }}", x.code, x.jt, x.jf, x.k)?;
        }
        Ok(())
    }
}

impl Program {
    /// From raw instructions.
    pub fn new(insns: Vec<Insn>) -> Result<Program, BpfError> {
        if insns.is_empty() {
            return Err(BpfError::Empty);
        }
        if insns.len() > BPF_MAXINSNS {
            return Err(BpfError::TooLong(insns.len()));
        }
        Ok(Program { insns })
    }

    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Instruction count.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Never true for a built program.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }
}

/// `cpu` steering: socket `i` is for CPU `cpus[i]`. If the CPUs are exactly
/// `0..n` the program is `ld #cpu; ret a`; otherwise a compare chain, and
/// datagrams processed on a CPU not in the list get [`FALLBACK`].
pub fn cpu_program(cpus: &[usize]) -> Result<Program, BpfError> {
    if cpus.is_empty() {
        return Err(BpfError::Empty);
    }
    let mut p = vec![stmt(BPF_LD | BPF_W | BPF_ABS, (SKF_AD_OFF + SKF_AD_CPU) as u32)];
    if cpus.iter().enumerate().all(|(i, &c)| i == c) {
        p.push(stmt(BPF_RET | BPF_A, 0));
    } else {
        for (i, &c) in cpus.iter().enumerate() {
            p.push(insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, c as u32));
            p.push(stmt(BPF_RET | BPF_K, i as u32));
        }
        p.push(stmt(BPF_RET | BPF_K, FALLBACK));
    }
    Program::new(p)
}

const fn net(off: i32) -> u32 {
    (SKF_NET_OFF + off) as u32
}

/// `toeplitz` steering: the Toeplitz hash of the datagram under `key` and
/// hash type `ht` (2-tuple: addresses; 4-tuple: addresses and ports), the
/// bucket `hash & (table.len() - 1)`, and socket index `table[bucket]`.
/// `ht` picks the family: run an IPv4 program on an IPv4 group only.
pub fn toeplitz_program(key: &RssKey, ht: HashType, table: &[u32]) -> Result<Program, BpfError> {
    let n = table.len();
    if n == 0 || !n.is_power_of_two() || n > 65536 {
        return Err(BpfError::BadTable(n));
    }
    let k = key.as_bytes();
    if k.len() < ht.input_len() + 4 {
        return Err(BpfError::KeyTooShort { key: k.len(), input: ht.input_len() });
    }
    let mut p = Vec::new();
    let ld_w = |off: i32| stmt(BPF_LD | BPF_W | BPF_ABS, net(off));
    // 1. The input words into scratch memory: M[w] = input bytes 4w..4w+4.
    let mut words = 0u32;
    let mut store = |p: &mut Vec<Insn>, load: Insn| {
        p.push(load);
        p.push(stmt(BPF_ST, words));
        words += 1;
    };
    if ht.is_ipv6() {
        // Only UDP (TCP for a TCP hash type: reuseport programs also run on
        // a listener's SYN, skb data past the TCP header) directly after the
        // fixed header; otherwise no opinion.
        let l4 = if ht == HashType::TcpIpv6 { L4Proto::Tcp } else { L4Proto::Udp }.number();
        p.push(stmt(BPF_LD | BPF_B | BPF_ABS, net(6)));
        p.push(insn(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, u32::from(l4)));
        p.push(stmt(BPF_RET | BPF_K, FALLBACK));
        for i in 0..8 {
            store(&mut p, ld_w(8 + 4 * i));
        }
        if ht.has_ports() {
            store(&mut p, ld_w(40));
        }
    } else {
        store(&mut p, ld_w(12));
        store(&mut p, ld_w(16));
        if ht.has_ports() {
            // X = 4 * IHL; A = [net + X] = source port << 16 | destination port.
            p.push(stmt(BPF_LDX | BPF_B | BPF_MSH, net(0)));
            store(&mut p, stmt(BPF_LD | BPF_W | BPF_IND, net(0)));
        }
    }
    // 2. Only the low `bits` bits of the hash matter (bucket = hash & mask).
    // Bit j of the hash is the parity of (input AND the key window that
    // starts at bit 31 - j), word by word: the window for word w is
    // key_window(32w + 31 - j). Branch-free, ~4 instructions per word and
    // 15 for the parity fold, per bucket bit; the result builds up in M[15].
    const RESULT: u32 = 15;
    p.push(stmt(BPF_LD | BPF_IMM, 0));
    p.push(stmt(BPF_ST, RESULT));
    let bits = n.trailing_zeros() as usize;
    for j in 0..bits {
        let mut any = false;
        for w in 0..words {
            let mask = key_window(k, 32 * w as usize + 31 - j);
            if mask == 0 {
                continue;
            }
            p.push(stmt(BPF_LD | BPF_MEM, w));
            p.push(stmt(BPF_ALU | BPF_AND | BPF_K, mask));
            if any {
                p.push(stmt(BPF_ALU | BPF_XOR | BPF_X, 0));
            }
            p.push(stmt(BPF_MISC | BPF_TAX, 0));
            any = true;
        }
        if !any {
            continue; // bit j is 0 whatever the input
        }
        // Parity of X (A == X here): fold 32 -> 1.
        for (n, sh) in [16u32, 8, 4, 2, 1].into_iter().enumerate() {
            if n > 0 {
                p.push(stmt(BPF_MISC | BPF_TAX, 0));
            }
            p.push(stmt(BPF_ALU | BPF_RSH | BPF_K, sh));
            p.push(stmt(BPF_ALU | BPF_XOR | BPF_X, 0));
        }
        p.push(stmt(BPF_ALU | BPF_AND | BPF_K, 1));
        if j > 0 {
            p.push(stmt(BPF_ALU | BPF_LSH | BPF_K, j as u32));
        }
        p.push(stmt(BPF_MISC | BPF_TAX, 0));
        p.push(stmt(BPF_LD | BPF_MEM, RESULT));
        p.push(stmt(BPF_ALU | BPF_OR | BPF_X, 0));
        p.push(stmt(BPF_ST, RESULT));
    }
    // A = bucket.
    p.push(stmt(BPF_LD | BPF_MEM, RESULT));
    let socks = table.iter().max().copied().unwrap_or(0) + 1;
    if table.iter().all(|&s| s == table[0]) {
        p.push(stmt(BPF_RET | BPF_K, table[0]));
    } else if table.iter().enumerate().all(|(b, &s)| s == b as u32 % socks) {
        // Round robin: socket = bucket % sockets.
        p.push(stmt(BPF_ALU | BPF_MOD | BPF_K, socks));
        p.push(stmt(BPF_RET | BPF_A, 0));
    } else {
        for (b, &s) in table.iter().enumerate() {
            p.push(insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, b as u32));
            p.push(stmt(BPF_RET | BPF_K, s));
        }
        p.push(stmt(BPF_RET | BPF_K, FALLBACK));
    }
    Program::new(p)
}

/// A datagram as a reuseport program sees it: the network header onwards,
/// and where the payload (`skb->data`) starts.
#[derive(Debug, Clone)]
pub struct SkbView<'a> {
    /// From the IP header to the end of the datagram.
    pub net: &'a [u8],
    /// Offset of `skb->data` (the UDP payload) in `net`.
    pub data_off: usize,
    /// The CPU `ld #cpu` reports.
    pub cpu: u32,
}

/// Why [`interpret`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterpError {
    /// A load outside the packet: the kernel returns 0 (drops) here.
    OutOfBounds(usize),
    /// An opcode this interpreter does not know.
    BadOpcode(usize, u16),
    /// Division by zero.
    DivZero(usize),
    /// Jumped or fell off the end.
    NoReturn,
}

/// A small classic BPF interpreter with the kernel's semantics for the
/// instructions the builders above use, for tests and for explaining a
/// verdict (`SKF_NET_OFF` loads, `ld #cpu`, `ldxb 4*([k]&0xf)`).
pub fn interpret(prog: &Program, skb: &SkbView<'_>) -> Result<u32, InterpError> {
    let (mut a, mut x) = (0u32, 0u32);
    let mut m = [0u32; BPF_MEMWORDS as usize];
    let mut pc = 0usize;
    let load = |pc: usize, off: i64, size: usize| -> Result<u32, InterpError> {
        let (buf, at) = if off >= 0 {
            (skb.net, skb.data_off as i64 + off)
        } else if off >= i64::from(SKF_NET_OFF) && off < i64::from(SKF_AD_OFF) {
            (skb.net, off - i64::from(SKF_NET_OFF))
        } else {
            return Err(InterpError::OutOfBounds(pc));
        };
        let at = usize::try_from(at).map_err(|_| InterpError::OutOfBounds(pc))?;
        let bytes = buf.get(at..at + size).ok_or(InterpError::OutOfBounds(pc))?;
        Ok(bytes.iter().fold(0u32, |v, &b| (v << 8) | u32::from(b)))
    };
    let size_of = |code: u16| match code & 0x18 {
        BPF_W => 4,
        BPF_H => 2,
        _ => 1,
    };
    while let Some(i) = prog.insns.get(pc) {
        let (code, k) = (i.code, i.k);
        pc += 1;
        match code & 0x07 {
            BPF_LD => match code & 0xe0 {
                BPF_IMM => a = k,
                BPF_ABS if k as i32 == SKF_AD_OFF + SKF_AD_CPU => a = skb.cpu,
                BPF_ABS => a = load(pc - 1, i64::from(k as i32), size_of(code))?,
                BPF_IND => a = load(pc - 1, i64::from(x) + i64::from(k as i32), size_of(code))?,
                BPF_MEM => a = m[k as usize % 16],
                BPF_LEN => a = (skb.net.len() - skb.data_off) as u32,
                _ => return Err(InterpError::BadOpcode(pc - 1, code)),
            },
            BPF_LDX => match code & 0xe0 {
                BPF_IMM => x = k,
                BPF_MEM => x = m[k as usize % 16],
                BPF_MSH => x = 4 * (load(pc - 1, i64::from(k as i32), 1)? & 0xf),
                _ => return Err(InterpError::BadOpcode(pc - 1, code)),
            },
            BPF_ST => m[k as usize % 16] = a,
            BPF_STX => m[k as usize % 16] = x,
            BPF_ALU => {
                let v = if code & BPF_X != 0 { x } else { k };
                a = match code & 0xf0 {
                    BPF_ADD => a.wrapping_add(v),
                    BPF_SUB => a.wrapping_sub(v),
                    BPF_MUL => a.wrapping_mul(v),
                    BPF_DIV | BPF_MOD if v == 0 => return Err(InterpError::DivZero(pc - 1)),
                    BPF_DIV => a / v,
                    BPF_MOD => a % v,
                    BPF_OR => a | v,
                    BPF_AND => a & v,
                    BPF_LSH => a.wrapping_shl(v),
                    BPF_RSH => a.wrapping_shr(v),
                    BPF_NEG => a.wrapping_neg(),
                    BPF_XOR => a ^ v,
                    _ => return Err(InterpError::BadOpcode(pc - 1, code)),
                }
            }
            BPF_JMP => {
                let v = if code & BPF_X != 0 { x } else { k };
                let taken = match code & 0xf0 {
                    BPF_JA => {
                        pc += k as usize;
                        continue;
                    }
                    BPF_JEQ => a == v,
                    BPF_JGT => a > v,
                    BPF_JGE => a >= v,
                    BPF_JSET => a & v != 0,
                    _ => return Err(InterpError::BadOpcode(pc - 1, code)),
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            BPF_RET => return Ok(if code & 0x18 == BPF_A { a } else { k }),
            _ => match code & 0xf8 {
                BPF_TAX => x = a,
                BPF_TXA => a = x,
                _ => return Err(InterpError::BadOpcode(pc - 1, code)),
            },
        }
    }
    Err(InterpError::NoReturn)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{FlowTuple, Toeplitz};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// IPv4 (with `opts` words of options) or IPv6 header + UDP header + payload.
    pub(crate) fn packet(t: &FlowTuple, opts: usize, payload: usize) -> (Vec<u8>, usize) {
        let mut p = Vec::new();
        match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                p.push(0x40 | (5 + opts as u8));
                p.extend_from_slice(&[0; 8]);
                p.push(t.proto.number());
                p.extend_from_slice(&[0; 2]);
                p.extend_from_slice(&s.octets());
                p.extend_from_slice(&d.octets());
                p.extend(std::iter::repeat_n(1u8, 4 * opts));
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                p.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, t.proto.number(), 64]);
                p.extend_from_slice(&s.octets());
                p.extend_from_slice(&d.octets());
            }
            _ => unreachable!(),
        }
        p.extend_from_slice(&t.src_port.to_be_bytes());
        p.extend_from_slice(&t.dst_port.to_be_bytes());
        p.extend_from_slice(&[0; 4]);
        let data_off = p.len();
        p.extend(std::iter::repeat_n(0xeeu8, payload));
        (p, data_off)
    }

    use crate::rng::XorShift64Star as Rng;

    fn random_tuple(r: &mut Rng, v6: bool) -> FlowTuple {
        let (s, d): (IpAddr, IpAddr) = if v6 {
            let a = (u128::from(r.next_u64()) << 64) | u128::from(r.next_u64());
            let b = (u128::from(r.next_u64()) << 64) | u128::from(r.next_u64());
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::from(r.next_u64() as u32).into(), Ipv4Addr::from(r.next_u64() as u32).into())
        };
        FlowTuple::new(s, r.next_u64() as u16, d, r.next_u64() as u16, L4Proto::Udp)
    }

    #[test]
    fn toeplitz_program_matches_software_hash() {
        let mut r = Rng(0x1234_5678_9abc_def1);
        for key in [RssKey::microsoft(), RssKey::symmetric()] {
            let soft = Toeplitz::new(&key);
            for ht in HashType::ALL {
                for (table, nsock) in
                    [(vec![0u32, 1, 2, 3, 0, 1, 2, 3], 4u32), (vec![2, 0, 1, 1], 3), (vec![1, 1], 2)]
                {
                    let prog = toeplitz_program(&key, ht, &table).unwrap();
                    assert!(prog.len() < BPF_MAXINSNS);
                    for i in 0..300 {
                        let mut t = random_tuple(&mut r, ht.is_ipv6());
                        if matches!(ht, HashType::TcpIpv4 | HashType::TcpIpv6) {
                            t.proto = L4Proto::Tcp;
                        }
                        let opts = if ht.is_ipv6() { 0 } else { i % 3 };
                        let (pkt, off) = packet(&t, opts, i % 50);
                        let h = soft.hash(t.input(ht).unwrap().as_bytes());
                        let want = table[h as usize & (table.len() - 1)];
                        let got = interpret(&prog, &SkbView { net: &pkt, data_off: off, cpu: 0 }).unwrap();
                        assert_eq!(got, want, "{ht} {t:?} hash {h:08x}");
                        assert!(got < nsock);
                    }
                }
            }
        }
    }

    #[test]
    fn raw_hash_bits_match() {
        // A 65536-entry identity table exposes the low 16 bits of the hash.
        let table: Vec<u32> = (0..65536).collect();
        let key = RssKey::microsoft();
        let prog = toeplitz_program(&key, HashType::UdpIpv4, &table).unwrap();
        let t = FlowTuple::new(
            "66.9.149.187".parse().unwrap(),
            2794,
            "161.142.100.80".parse().unwrap(),
            1766,
            L4Proto::Udp,
        );
        let (pkt, off) = packet(&t, 0, 0);
        // Microsoft spec vector: 0x51ccc178.
        assert_eq!(interpret(&prog, &SkbView { net: &pkt, data_off: off, cpu: 0 }), Ok(0xc178));
    }

    #[test]
    fn ipv6_extension_header_falls_back() {
        let prog = toeplitz_program(&RssKey::microsoft(), HashType::UdpIpv6, &[0, 1]).unwrap();
        let t = random_tuple(&mut Rng(7), true);
        let (mut pkt, off) = packet(&t, 0, 8);
        pkt[6] = 0; // hop-by-hop
        assert_eq!(interpret(&prog, &SkbView { net: &pkt, data_off: off, cpu: 0 }), Ok(FALLBACK));
    }

    #[test]
    fn sizes_within_limits() {
        let table: Vec<u32> = (0..128).map(|b| b % 3).collect();
        for ht in HashType::ALL {
            let p = toeplitz_program(&RssKey::microsoft(), ht, &table).unwrap();
            assert!(
                p.len() <= 2 * ht.input_len() / 4 + 7 * (ht.input_len() + 22) + 2 * 128 + 32,
                "{ht}: {}",
                p.len()
            );
        }
        assert_eq!(
            toeplitz_program(&RssKey::microsoft(), HashType::Ipv4, &[0, 1, 2]).unwrap_err(),
            BpfError::BadTable(3)
        );
    }

    #[test]
    fn cpu_programs() {
        let p = cpu_program(&[0, 1, 2]).unwrap();
        assert_eq!(p.len(), 2);
        let skb = |cpu| SkbView { net: &[0u8; 40], data_off: 28, cpu };
        assert_eq!(interpret(&p, &skb(2)), Ok(2));
        let p = cpu_program(&[1, 3]).unwrap();
        assert_eq!(interpret(&p, &skb(3)), Ok(1));
        assert_eq!(interpret(&p, &skb(1)), Ok(0));
        assert_eq!(interpret(&p, &skb(0)), Ok(FALLBACK));
        assert!(cpu_program(&[]).is_err());
    }
}
