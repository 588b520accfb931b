//! Two small deterministic generators, for the tests' and benchmarks'
//! inputs: no dependency, the same sequence on
//! every platform, so a seed names its inputs (the C benchmark harness
//! repeats [`SplitMix64`]).

/// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014): any seed, zero included.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (not zero); the modulo bias is negligible for
    /// the small `n` it is used with.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift
/// generators, scrambled", 2016). The seed must not be zero (it would stay
/// zero).
#[derive(Debug, Clone)]
pub struct XorShift64Star(pub u64);

impl XorShift64Star {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published first outputs of splitmix64 from seed 0, and a
    /// xorshift64* sequence that must not repeat or stick at zero.
    #[test]
    fn known_outputs() {
        let mut s = SplitMix64(0);
        assert_eq!(s.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(s.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut x = XorShift64Star(1);
        let v: alloc::vec::Vec<u64> = (0..4).map(|_| x.next_u64()).collect();
        assert!(v.iter().all(|&a| a != 0));
        assert_ne!(v[0], v[1]);
        assert!(SplitMix64(5).below(7) < 7);
    }
}
