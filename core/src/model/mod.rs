//! The model every layer shares: the types a front end, the router, sessions, the journal and
//! a persistence or cluster layer all speak, free of any wire protocol and of behaviour.
//!
//! A leaf: it depends on nothing of the core but topics, ACLs and the auth model, so the
//! behaviour modules (`broker`, `session`, `router`, `journal`) can all use it without using
//! each other. The MQTT codec re-exports [`QoS`] and [`RetainHandling`]; other protocols map
//! their notions onto these.
//!
//! # Layout
//!
//! - `qos`: [`QoS`], [`RetainHandling`], [`SubscribeOptions`].
//! - `message`: the application [`Message`] with its [`MessageProperties`] and [`Origin`],
//!   [`SessionId`], and the message [`digest`].
//! - `delivery`: a [`Delivery`] to one subscriber, its [`SharedRoute`], and a [`Will`].
//! - `session`: [`SessionKey`] and its [`Namespace`], [`SessionExpiry`], and the [`Kick`] that
//!   closes a connection from outside.

mod delivery;
mod message;
mod qos;
mod session;

pub use delivery::{Delivery, SharedRoute, SubscriptionIds, Will};
pub use message::{Message, MessageId, MessageProperties, NodeId, Origin, SessionId, digest};
pub use qos::{QoS, RetainHandling, SubscribeOptions};
pub use session::{ClientInfo, Kick, Namespace, SessionExpiry, SessionKey};
