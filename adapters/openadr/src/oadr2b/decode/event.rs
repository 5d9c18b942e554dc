//! Decoding of `oadrDistributeEvent`: events, their active period, signals, intervals and
//! targets, with the warnings a VEN should see (duplicate event ids, interval durations that do
//! not add up to the event, out-of-range SIMPLE levels and capacities).
//!
//! Separate because the event is the message the VEN acts on, and its checks are the ones
//! most worth reading on their own.

use chrono::TimeDelta;

use super::fields::{
    Path, date_time, dur, ei_response, invalid, is_decimal_of, item_base, missing, opt_text, opt_wrapped_duration,
    opt_wrapped_event_duration, parse_float, parse_u32, req, req_text,
};
use super::{Cx, DecodeError};
use crate::oadr2b::model::{DistributeEvent, Event, EventStatus, Interval, ResponseRequired, Signal, Targets};
use crate::oadr2b::xml::{Node, Ns};

impl Cx<'_> {
    pub(super) fn distribute(&mut self, m: Node) -> Result<DistributeEvent, DecodeError> {
        let p = &Path::Root(m.name());
        let response = match m.child(Ns::Ei, "eiResponse") {
            Some(r) => Some(ei_response(r, &p.child("eiResponse"))?),
            None => None,
        };
        let request_id = req_text(m, Ns::Pyld, "requestID", p)?;
        let vtn_id = req_text(m, Ns::Ei, "vtnID", p)?;
        let nodes = self.limited(m, Ns::Oadr, "oadrEvent", p)?;
        let mut events = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.enumerate() {
            events.push(self.event(n, &p.nth("oadrEvent", i))?);
        }
        for (i, e) in events.iter().enumerate() {
            if events[..i].iter().any(|o| o.id == e.id) {
                self.warn(&p.nth("oadrEvent", i), format!("duplicate eventID {:?}", e.id));
            }
        }
        Ok(DistributeEvent {
            response,
            request_id,
            vtn_id,
            events,
            warnings: std::mem::take(&mut self.warnings),
        })
    }

    pub(super) fn event(&mut self, n: Node, p: &Path) -> Result<Event, DecodeError> {
        self.event_problems.clear();
        let ei_p = p.child("eiEvent");
        let ei = req(n, Ns::Ei, "eiEvent", p)?;
        let dp = ei_p.child("eventDescriptor");
        let d = req(ei, Ns::Ei, "eventDescriptor", &ei_p)?;
        let id = req_text(d, Ns::Ei, "eventID", &dp)?;
        let modification_number = parse_u32(
            req(d, Ns::Ei, "modificationNumber", &dp)?.text(),
            &dp.child("modificationNumber"),
        )?;
        let priority = match d.child(Ns::Ei, "priority") {
            Some(x) if !x.trimmed().is_empty() => Some(parse_u32(x.text(), &dp.child("priority"))?),
            _ => None,
        };
        let market_context = d
            .child(Ns::Ei, "eiMarketContext")
            .and_then(|mc| opt_text(mc, Ns::Emix, "marketContext"));
        let created = match d.child(Ns::Ei, "createdDateTime") {
            Some(x) => Some(date_time(x.text(), &dp.child("createdDateTime"))?),
            None => None,
        };
        let sp = dp.child("eventStatus");
        let status_text = req(d, Ns::Ei, "eventStatus", &dp)?.trimmed();
        let status = match status_text {
            "none" => EventStatus::None,
            "far" => EventStatus::Far,
            "near" => EventStatus::Near,
            "active" => EventStatus::Active,
            "completed" => EventStatus::Completed,
            "cancelled" => EventStatus::Cancelled,
            other => return Err(invalid(&sp, other, "expected none|far|near|active|completed|cancelled")),
        };
        let test = d.child(Ns::Ei, "testEvent").is_some_and(|t| t.trimmed() != "false");
        let vtn_comment = opt_text(d, Ns::Ei, "vtnComment");

        let ap = ei_p.child("eiActivePeriod");
        let active = req(ei, Ns::Ei, "eiActivePeriod", &ei_p)?;
        let pp = ap.child("properties");
        let props = req(active, Ns::Xcal, "properties", &ap)?;
        let dtp = pp.child("dtstart");
        let dtstart_node = req(req(props, Ns::Xcal, "dtstart", &pp)?, Ns::Xcal, "date-time", &dtp)?;
        let dtstart = date_time(dtstart_node.text(), &dtp.child("date-time"))?;
        // An unreadable duration refuses this event (never "no end"), not the whole message.
        let duration = match opt_wrapped_event_duration(props, Ns::Xcal, "duration", &pp) {
            Ok(d) => d.ok_or_else(|| missing(&pp.child("duration")))?,
            Err(e) => {
                self.event_problems.push(e.to_string());
                TimeDelta::zero()
            }
        };
        let duration = (duration != TimeDelta::zero()).then_some(duration);
        if duration.is_some_and(|d| d < TimeDelta::zero()) {
            return Err(invalid(&pp.child("duration"), "", "negative event duration"));
        }
        let start_after = match props.child(Ns::Xcal, "tolerance") {
            Some(tol) => {
                let tp = pp.child("tolerance");
                match tol
                    .child(Ns::Xcal, "tolerate")
                    .and_then(|t| t.child(Ns::Xcal, "startafter"))
                {
                    Some(sa) => Some(dur(sa.text(), &tp.child("tolerate").child("startafter"))?),
                    None => None,
                }
            }
            None => None,
        };
        let notification = opt_wrapped_duration(props, Ns::Ei, "x-eiNotification", &pp)?;
        let ramp_up = opt_wrapped_duration(props, Ns::Ei, "x-eiRampUp", &pp)?;
        let recovery = opt_wrapped_duration(props, Ns::Ei, "x-eiRecovery", &pp)?;

        let rp = p.child("oadrResponseRequired");
        let response_required = match n.child(Ns::Oadr, "oadrResponseRequired").map(|r| r.trimmed()) {
            None => None,
            Some("always") => Some(ResponseRequired::Always),
            Some("never") => Some(ResponseRequired::Never),
            Some(other) => return Err(invalid(&rp, other, "expected always|never")),
        };

        let sigs_p = ei_p.child("eiEventSignals");
        let sigs = req(ei, Ns::Ei, "eiEventSignals", &ei_p)?;
        let sig_nodes = self.limited(sigs, Ns::Ei, "eiEventSignal", &sigs_p)?;
        let mut signals = Vec::with_capacity(sig_nodes.len());
        for (i, s) in sig_nodes.enumerate() {
            signals.push(self.signal(s, &sigs_p.nth("eiEventSignal", i), duration)?);
        }
        let targets = match ei.child(Ns::Ei, "eiTarget") {
            Some(t) => self.targets(t, &ei_p.child("eiTarget"))?,
            None => Targets::default(),
        };
        Ok(Event {
            id,
            modification_number,
            priority,
            market_context,
            created,
            status,
            test,
            vtn_comment,
            dtstart,
            duration,
            start_after,
            notification,
            ramp_up,
            recovery,
            response_required,
            signals,
            targets,
            invalid: std::mem::take(&mut self.event_problems),
        })
    }

    pub(super) fn targets(&self, t: Node, p: &Path) -> Result<Targets, DecodeError> {
        Ok(Targets {
            ven_id: self.texts(t, Ns::Ei, "venID", p)?,
            group_id: self.texts(t, Ns::Ei, "groupID", p)?,
            resource_id: self.texts(t, Ns::Ei, "resourceID", p)?,
            party_id: self.texts(t, Ns::Ei, "partyID", p)?,
        })
    }

    pub(super) fn signal(
        &mut self,
        s: Node,
        p: &Path,
        event_duration: Option<TimeDelta>,
    ) -> Result<Signal, DecodeError> {
        let name = req_text(s, Ns::Ei, "signalName", p)?;
        let signal_type = req_text(s, Ns::Ei, "signalType", p)?;
        let id = req_text(s, Ns::Ei, "signalID", p)?;
        let item_base = s
            .children()
            .find(|c| matches!(c.ns(), Ns::Power | Ns::Emix | Ns::Oadr) || c.child(Ns::Scale, "siScaleCode").is_some())
            .map(item_base);
        let current_value = match s.child(Ns::Ei, "currentValue") {
            Some(cv) => {
                let cp = p.child("currentValue");
                let pf = req(cv, Ns::Ei, "payloadFloat", &cp)?;
                let pfp = cp.child("payloadFloat");
                Some(parse_float(
                    req(pf, Ns::Ei, "value", &pfp)?.text(),
                    &pfp.child("value"),
                )?)
            }
            None => None,
        };
        let ip = p.child("intervals");
        let ints = req(s, Ns::Strm, "intervals", p)?;
        let int_nodes = self.limited(ints, Ns::Ei, "interval", &ip)?;
        let single = int_nodes.len() == 1;
        let mut intervals = Vec::with_capacity(int_nodes.len());
        for (i, n) in int_nodes.enumerate() {
            let np = ip.nth("interval", i);
            let duration = match opt_wrapped_event_duration(n, Ns::Xcal, "duration", &np) {
                Ok(d) => d,
                Err(e) => {
                    self.event_problems.push(e.to_string());
                    Some(TimeDelta::zero())
                }
            };
            if duration.is_none() && !single {
                return Err(missing(&np.child("duration")));
            }
            if duration.is_some_and(|d| d < TimeDelta::zero()) {
                return Err(invalid(&np.child("duration"), "", "negative interval duration"));
            }
            let uid = n.child(Ns::Xcal, "uid").and_then(|u| opt_text(u, Ns::Xcal, "text"));
            if !uid.as_deref().is_some_and(|u| is_decimal_of(u, i)) {
                self.warn(&np, format!("uid {uid:?} is not the 0-based position {i}"));
            }
            let dtstart = match n.child(Ns::Xcal, "dtstart") {
                Some(ds) => {
                    let dp = np.child("dtstart");
                    let dt = date_time(req(ds, Ns::Xcal, "date-time", &dp)?.text(), &dp.child("date-time"))?;
                    self.warn(
                        &np,
                        "per-interval dtstart (openleadr style); starts are computed from the event dtstart",
                    );
                    Some(dt)
                }
                None => None,
            };
            let payloads = self.limited(n, Ns::Ei, "signalPayload", &np)?;
            let count = payloads.len();
            if count == 0 {
                return Err(missing(&np.child("signalPayload")));
            }
            let mut values = Vec::with_capacity(count);
            for (j, pl) in payloads.enumerate() {
                let plp = if count == 1 {
                    np.child("signalPayload")
                } else {
                    np.nth("signalPayload", j)
                };
                let pf = req(pl, Ns::Ei, "payloadFloat", &plp)?;
                let pfp = plp.child("payloadFloat");
                let v = parse_float(req(pf, Ns::Ei, "value", &pfp)?.text(), &pfp.child("value"))?;
                values.push(v);
            }
            intervals.push(Interval {
                uid,
                duration,
                dtstart,
                values,
            });
        }
        // Interval durations must add up to the active period (conformance rule 8).
        if let Some(total) = event_duration
            && !(single && intervals[0].duration.is_none())
        {
            let sum = intervals
                .iter()
                .filter_map(|i| i.duration)
                .fold(TimeDelta::zero(), |a, b| a + b);
            if sum != total && !intervals.is_empty() {
                self.warn(
                    &ip,
                    format!(
                        "interval durations add up to {}s, the event lasts {}s",
                        sum.num_seconds(),
                        total.num_seconds()
                    ),
                );
            }
        }
        match (name.as_str(), signal_type.as_str()) {
            (_, "x-loadControlCapacity") => {
                for (i, iv) in intervals.iter().enumerate() {
                    if iv.values.iter().any(|v| !(0.0..=1.0).contains(v)) {
                        self.warn(
                            &ip.nth("interval", i),
                            format!("x-loadControlCapacity value {:?} is outside [0, 1]", iv.values),
                        );
                    }
                }
            }
            ("SIMPLE", _) => {
                for (i, iv) in intervals.iter().enumerate() {
                    if iv.values.iter().any(|v| !(0.0..=3.0).contains(v) || v.fract() != 0.0) {
                        self.warn(
                            &ip.nth("interval", i),
                            format!("SIMPLE level {:?} is not one of 0, 1, 2, 3", iv.values),
                        );
                    }
                }
            }
            _ => {}
        }
        let targets = match s.child(Ns::Ei, "eiTarget") {
            Some(t) => Some(self.targets(t, &p.child("eiTarget"))?),
            None => None,
        };
        Ok(Signal {
            name,
            signal_type,
            id,
            item_base,
            current_value,
            intervals,
            targets,
        })
    }
}
