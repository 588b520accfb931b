//! Ethernet II header and 802.1Q / 802.1ad VLAN tag views.

use super::field::{get16, set16, Field};
use super::DropReason;

/// Ethernet II field ranges.
pub mod field {
    use super::Field;
    /// Destination MAC.
    pub const DST: Field = 0..6;
    /// Source MAC.
    pub const SRC: Field = 6..12;
    /// EtherType (or the TPID of a VLAN tag).
    pub const ETHERTYPE: Field = 12..14;
}

/// Ethernet II header length (no FCS).
pub const HEADER_LEN: usize = 14;

/// A view of an Ethernet II frame (without FCS).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view without checks: accessors panic on a short buffer.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// A view of a buffer that holds the whole header.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DropReason::EthTruncated);
        }
        Ok(EthernetFrame { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        m
    }

    /// Source MAC.
    pub fn src(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        m
    }

    /// EtherType of the payload (a VLAN TPID if tagged).
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        get16(self.buffer.as_ref(), field::ETHERTYPE)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// Everything after the header.
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Everything after the header, to write.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Sets the destination MAC.
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }

    /// Sets the source MAC.
    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, et: u16) {
        set16(self.buffer.as_mut(), field::ETHERTYPE, et);
    }
}

/// VLAN tag field ranges (after the TPID, which is the EtherType field
/// of the header before it).
pub mod vlan_field {
    use super::Field;
    /// Priority (3 bits), drop eligible (1), VLAN id (12).
    pub const TCI: Field = 0..2;
    /// EtherType of what follows the tag.
    pub const ETHERTYPE: Field = 2..4;
}

/// VLAN tag length (without the TPID).
pub const VLAN_LEN: usize = 4;

/// A view of one VLAN tag: TCI and inner EtherType.
#[derive(Debug, Clone, Copy)]
pub struct VlanHeader<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// A view without checks.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanHeader { buffer }
    }

    /// A view of a buffer that holds the whole tag.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < VLAN_LEN {
            return Err(DropReason::VlanTruncated);
        }
        Ok(VlanHeader { buffer })
    }

    /// Tag control information.
    #[inline(always)]
    pub fn tci(&self) -> u16 {
        get16(self.buffer.as_ref(), vlan_field::TCI)
    }

    /// EtherType after the tag.
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        get16(self.buffer.as_ref(), vlan_field::ETHERTYPE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanHeader<T> {
    /// Sets the TCI.
    pub fn set_tci(&mut self, tci: u16) {
        set16(self.buffer.as_mut(), vlan_field::TCI, tci);
    }

    /// Sets the EtherType after the tag.
    pub fn set_ethertype(&mut self, et: u16) {
        set16(self.buffer.as_mut(), vlan_field::ETHERTYPE, et);
    }
}
