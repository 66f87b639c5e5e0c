//! Flows that join one collective across the ranks of a merged trace.
//!
//! A collective's span on each member rank's `collective` link lane carries `kind`, `group`
//! (the group's global ranks) and `seq` (the group's collective counter, the same on every
//! member for the same call). Spans agreeing on all three are one collective: a `collective`
//! flow goes from the lowest rank's span start to each other member's. Point-to-point
//! transfers carry no `seq`: the k-th `send` from rank a with `to` = b pairs with the k-th
//! `recv` on rank b with `from` = a, joined by a `send -> recv` flow.

use std::collections::BTreeMap;

use serde_json::Value;

use super::COLLECTIVE_LINK;
use crate::trace::{Flow, Span, TraceEvent, Track};

/// Name of the flows joining a collective's spans.
pub const COLLECTIVE_FLOW: &str = "collective";
/// Name of the flows joining a send to its receive.
pub const SEND_FLOW: &str = "send -> recv";

/// A collective's identity: (group, seq, kind).
type Key = (Vec<u64>, u64, String);

/// The joining flows of the merged `events`, numbered from `first_id`, ordered by the time
/// of their source (then by rank), so the same events give the same flows.
pub(super) fn join_collectives(events: &[TraceEvent], first_id: u64) -> Vec<Flow> {
    let by_chip = collective_spans(events);
    let mut flows: Vec<(f64, u32, Flow)> = Vec::new();
    let mut push = |name: &str, (a, sa): (u32, &Span), (b, sb): (u32, &Span)| {
        flows.push((
            sa.start_ns,
            a,
            Flow {
                id: 0,
                name: name.to_string(),
                from: link(a),
                from_ns: sa.start_ns,
                to: link(b),
                to_ns: sb.start_ns,
            },
        ));
    };

    // Collectives: members by key, in rank order (the map is by chip).
    let mut members: BTreeMap<Key, Vec<(u32, &Span)>> = BTreeMap::new();
    for (&chip, spans) in &by_chip {
        for s in spans {
            if let Some(key) = key_of(s) {
                members.entry(key).or_default().push((chip, s));
            }
        }
    }
    for list in members.values() {
        if let Some((&root, rest)) = list.split_first() {
            for &m in rest {
                push(COLLECTIVE_FLOW, root, m);
            }
        }
    }

    // Point to point: the k-th send a -> b with the k-th receive at b from a.
    let mut sends: BTreeMap<(u32, u32), Vec<&Span>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32), Vec<&Span>> = BTreeMap::new();
    for (&chip, spans) in &by_chip {
        for s in spans {
            match (kind(s), peer(s, "to"), peer(s, "from")) {
                (Some("send"), Some(to), _) => sends.entry((chip, to)).or_default().push(s),
                (Some("recv"), _, Some(from)) => recvs.entry((from, chip)).or_default().push(s),
                _ => {}
            }
        }
    }
    for ((a, b), list) in &mut sends {
        let Some(got) = recvs.get_mut(&(*a, *b)) else {
            continue;
        };
        list.sort_by(|x, y| x.start_ns.total_cmp(&y.start_ns));
        got.sort_by(|x, y| x.start_ns.total_cmp(&y.start_ns));
        for (s, r) in list.iter().zip(got.iter()) {
            push(SEND_FLOW, (*a, s), (*b, r));
        }
    }

    // Stable: ties keep the order above.
    flows.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    flows
        .into_iter()
        .zip(first_id..)
        .map(|((_, _, f), id)| Flow { id, ..f })
        .collect()
}

fn link(chip: u32) -> Track {
    Track::Link {
        chip,
        link: COLLECTIVE_LINK.to_string(),
    }
}

/// Spans of the collective lane, by chip, in event order.
fn collective_spans(events: &[TraceEvent]) -> BTreeMap<u32, Vec<&Span>> {
    let mut out: BTreeMap<u32, Vec<&Span>> = BTreeMap::new();
    for ev in events {
        if let TraceEvent::Span(s) = ev
            && let Track::Link { chip, link } = &s.track
            && link == COLLECTIVE_LINK
        {
            out.entry(*chip).or_default().push(s);
        }
    }
    out
}

fn kind(s: &Span) -> Option<&str> {
    s.args.get("kind").and_then(Value::as_str)
}

fn peer(s: &Span, key: &str) -> Option<u32> {
    s.args
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
}

/// (group, seq, kind) of a collective span; `None` without all three.
fn key_of(s: &Span) -> Option<Key> {
    let group = s
        .args
        .get("group")?
        .as_array()?
        .iter()
        .map(Value::as_u64)
        .collect::<Option<Vec<u64>>>()?;
    let seq = s.args.get("seq")?.as_u64()?;
    Some((group, seq, kind(s)?.to_string()))
}
