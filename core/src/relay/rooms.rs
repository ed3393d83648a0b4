//! Rooms: named broadcast groups of connections.
//!
//! `join_room` adds a connection to a room (made on first join) and answers
//! `joined_room{room, members}` with the member count, the joiner included; joining again
//! changes nothing. `room_send` goes to every other member as `room_deliver`; from a
//! non-member it is `join a room first`. A connection leaves when it disconnects (the seed has
//! no `leave_room`; [`Rooms::leave`] exists for ACL changes), and a room with no members is
//! gone. Members are kept in join order so that a broadcast is one pass over a vector, and the
//! caller encodes the `room_deliver` once and hands the same bytes to every recipient.
//!
//! The type is generic over the connection handle `H` and does no I/O: methods return who must
//! be told what.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use smallvec::SmallVec;

use super::error::{Limit, RelayError};

/// The caps of the room table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoomLimits {
    /// Rooms one connection may be in.
    pub rooms_per_connection: usize,
    /// Members one room may have.
    pub members_per_room: usize,
    /// Rooms relay-wide.
    pub rooms: usize,
}

impl Default for RoomLimits {
    /// 32 rooms per connection, 1,000 members per room, 100,000 rooms.
    fn default() -> Self {
        RoomLimits { rooms_per_connection: 32, members_per_room: 1_000, rooms: 100_000 }
    }
}

/// Every room and its members.
#[derive(Debug)]
pub struct Rooms<H> {
    rooms: HashMap<Arc<str>, Vec<H>>,
    joined: HashMap<H, SmallVec<[Arc<str>; 4]>>,
    limits: RoomLimits,
    memberships: usize,
    refused: u64,
}

impl<H: Clone + Eq + Hash> Rooms<H> {
    /// No rooms.
    pub fn new(limits: RoomLimits) -> Self {
        Rooms { rooms: HashMap::new(), joined: HashMap::new(), limits, memberships: 0, refused: 0 }
    }

    /// Adds `who` to `room`; returns the member count (for `joined_room`).
    pub fn join(&mut self, who: &H, room: &str) -> Result<usize, RelayError> {
        let mine = self.joined.get(who);
        if mine.is_some_and(|rooms| rooms.iter().any(|r| &**r == room)) {
            return Ok(self.rooms.get(room).map_or(0, Vec::len));
        }
        let refusal = if mine.is_some_and(|rooms| rooms.len() >= self.limits.rooms_per_connection) {
            Some(Limit::RoomsPerConnection)
        } else {
            match self.rooms.get(room) {
                Some(members) if members.len() >= self.limits.members_per_room => Some(Limit::RoomMembers),
                None if self.rooms.len() >= self.limits.rooms => Some(Limit::Rooms),
                _ => None,
            }
        };
        if let Some(limit) = refusal {
            self.refused += 1;
            return Err(RelayError::LimitReached(limit));
        }
        // One shared name for the room table and every member's list.
        let name =
            self.rooms.get_key_value(room).map_or_else(|| Arc::from(room), |(name, _)| Arc::clone(name));
        let members = self.rooms.entry(Arc::clone(&name)).or_default();
        members.push(who.clone());
        let count = members.len();
        self.joined.entry(who.clone()).or_default().push(name);
        self.memberships += 1;
        Ok(count)
    }

    /// The members of `room` other than `who`, in join order (the recipients of a
    /// `room_send`); `join a room first` if `who` is not a member.
    pub fn recipients<'s>(
        &'s self,
        who: &'s H,
        room: &str,
    ) -> Result<impl Iterator<Item = &'s H> + 's, RelayError> {
        let is_member = self.joined.get(who).is_some_and(|rooms| rooms.iter().any(|r| &**r == room));
        match self.rooms.get(room) {
            Some(members) if is_member => Ok(members.iter().filter(move |m| *m != who)),
            _ => Err(RelayError::JoinRoomFirst),
        }
    }

    /// Every member of `room`, in join order (the recipients of a `room_send` from another
    /// node).
    pub fn all_members<'s>(&'s self, room: &str) -> impl Iterator<Item = &'s H> + 's {
        self.rooms.get(room).into_iter().flatten()
    }

    /// Removes `who` from `room`; returns whether it was a member.
    pub fn leave(&mut self, who: &H, room: &str) -> bool {
        let Some(mine) = self.joined.get_mut(who) else {
            return false;
        };
        let Some(at) = mine.iter().position(|r| &**r == room) else {
            return false;
        };
        mine.swap_remove(at);
        if mine.is_empty() {
            self.joined.remove(who);
        }
        self.remove_member(who, room);
        true
    }

    /// Removes `who` from every room; returns how many it was in.
    pub fn disconnect(&mut self, who: &H) -> usize {
        let Some(mine) = self.joined.remove(who) else {
            return 0;
        };
        for room in &mine {
            self.remove_member(who, room);
        }
        mine.len()
    }

    fn remove_member(&mut self, who: &H, room: &str) {
        if let Some(members) = self.rooms.get_mut(room) {
            if let Some(at) = members.iter().position(|m| m == who) {
                // Keeps join order: broadcasts stay in a stable order.
                members.remove(at);
                self.memberships -= 1;
            }
            if members.is_empty() {
                self.rooms.remove(room);
            }
        }
    }

    /// The rooms `who` is in, in the order it joined them (to re-check them when its rules
    /// change).
    pub fn rooms_of<'s>(&'s self, who: &H) -> impl Iterator<Item = &'s Arc<str>> + 's {
        self.joined.get(who).into_iter().flatten()
    }

    /// The member count of `room`.
    pub fn members(&self, room: &str) -> usize {
        self.rooms.get(room).map_or(0, Vec::len)
    }

    /// Rooms that exist.
    pub fn rooms(&self) -> usize {
        self.rooms.len()
    }

    /// Memberships over all rooms.
    pub fn memberships(&self) -> usize {
        self.memberships
    }

    /// Joins refused by a cap so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    fn recipients(rooms: &Rooms<u32>, who: u32, room: &str) -> Result<Vec<u32>, RelayError> {
        rooms.recipients(&who, room).map(|it| it.copied().collect())
    }

    #[test]
    fn join_send_leave() {
        let mut rooms = Rooms::new(RoomLimits::default());
        assert_eq!(rooms.join(&1, "lobby"), Ok(1));
        assert_eq!(rooms.join(&2, "lobby"), Ok(2));
        assert_eq!(rooms.join(&3, "lobby"), Ok(3));
        assert_eq!(rooms.join(&2, "lobby"), Ok(3), "joining again changes nothing");
        assert_eq!(recipients(&rooms, 2, "lobby"), Ok(vec![1, 3]));
        rooms.join(&2, "hall").unwrap();
        assert_eq!(rooms.rooms_of(&2).map(|r| &**r).collect::<Vec<_>>(), ["lobby", "hall"]);
        assert!(rooms.leave(&2, "hall"));
        assert_eq!(rooms.rooms_of(&9).count(), 0);
        assert_eq!(recipients(&rooms, 4, "lobby"), Err(RelayError::JoinRoomFirst));
        assert_eq!(recipients(&rooms, 1, "nowhere"), Err(RelayError::JoinRoomFirst));
        assert!(rooms.leave(&1, "lobby"));
        assert!(!rooms.leave(&1, "lobby"));
        assert_eq!(recipients(&rooms, 1, "lobby"), Err(RelayError::JoinRoomFirst));
        assert_eq!(rooms.disconnect(&2), 1);
        assert_eq!(rooms.disconnect(&2), 0);
        assert_eq!(recipients(&rooms, 3, "lobby"), Ok(vec![]));
        assert_eq!(rooms.disconnect(&3), 1);
        assert_eq!((rooms.rooms(), rooms.memberships()), (0, 0));
    }

    #[test]
    fn caps() {
        let mut rooms = Rooms::new(RoomLimits { rooms_per_connection: 2, members_per_room: 2, rooms: 3 });
        assert_eq!(rooms.join(&1, "a"), Ok(1));
        assert_eq!(rooms.join(&1, "b"), Ok(1));
        assert_eq!(rooms.join(&1, "c"), Err(RelayError::LimitReached(Limit::RoomsPerConnection)));
        assert_eq!(rooms.join(&2, "a"), Ok(2));
        assert_eq!(rooms.join(&3, "a"), Err(RelayError::LimitReached(Limit::RoomMembers)));
        assert_eq!(rooms.join(&3, "c"), Ok(1));
        assert_eq!(rooms.join(&4, "d"), Err(RelayError::LimitReached(Limit::Rooms)));
        assert_eq!(rooms.refused(), 3);
        assert_eq!((rooms.rooms(), rooms.memberships()), (3, 4));
    }

    proptest! {
        /// Against a plain model (room → set of members): member counts, recipients and sizes
        /// agree after any sequence of joins, leaves and disconnects, and nothing is left once
        /// every connection has disconnected.
        #[test]
        fn agrees_with_a_set_model(ops in proptest::collection::vec((0u8..3, 0u32..6, 0usize..4), 1..200)) {
            const NAMES: [&str; 4] = ["a", "b", "c", "d"];
            let limits = RoomLimits { rooms_per_connection: 3, members_per_room: 4, rooms: 3 };
            let mut rooms = Rooms::new(limits);
            let mut model: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
            for (kind, who, room) in ops {
                let name = NAMES[room];
                match kind {
                    0 => {
                        let already = model.get(name).is_some_and(|m| m.contains(&who));
                        let mine = model.values().filter(|m| m.contains(&who)).count();
                        let size = model.get(name).map_or(0, BTreeSet::len);
                        let fits = already
                            || (mine < limits.rooms_per_connection
                                && size < limits.members_per_room
                                && (size > 0 || model.len() < limits.rooms));
                        let got = rooms.join(&who, name);
                        prop_assert_eq!(got.is_ok(), fits);
                        if fits {
                            model.entry(name).or_default().insert(who);
                            prop_assert_eq!(got, Ok(model[name].len()));
                        }
                    }
                    1 => {
                        let was = model.get_mut(name).is_some_and(|m| m.remove(&who));
                        prop_assert_eq!(rooms.leave(&who, name), was);
                    }
                    _ => {
                        let mut was = 0;
                        for members in model.values_mut() {
                            was += usize::from(members.remove(&who));
                        }
                        prop_assert_eq!(rooms.disconnect(&who), was);
                    }
                }
                model.retain(|_, m| !m.is_empty());
                prop_assert_eq!(rooms.rooms(), model.len());
                prop_assert_eq!(rooms.memberships(), model.values().map(BTreeSet::len).sum::<usize>());
                for (name, members) in &model {
                    prop_assert_eq!(rooms.members(name), members.len());
                    for m in members {
                        let got: BTreeSet<u32> = rooms.recipients(m, name).unwrap().copied().collect();
                        let want: BTreeSet<u32> = members.iter().copied().filter(|x| x != m).collect();
                        prop_assert_eq!(got, want);
                    }
                }
            }
            for who in 0..6 {
                rooms.disconnect(&who);
            }
            prop_assert_eq!((rooms.rooms(), rooms.memberships(), rooms.joined.len()), (0, 0, 0));
        }
    }
}
