//! `firm_service_level`: a drop-to level. There is no baseline: the site commits to hold its
//! metered load at or under a level during the event, and compliance is the meter against
//! that level, interval by interval.
//!
//! Source: PJM Manual 19 (*Load Forecasting and Analysis*), Attachment A, *Load Drop Estimate
//! Guidelines*, for Firm Service Level load management (with Manual 18, *PJM Capacity
//! Market*, for the commitment), and tariffs of the same form (PG&E's Base Interruptible
//! Program; ERCOT ERS's alternate baseline of a set level). The level is
//! the site's contract term, so it is this method's one parameter; the report gives it for
//! every interval and no baseline figure, and its notes say so, so no reduction is read off
//! it by mistake.
//!
//! Worked example: none is needed: the level is given, not computed.

use super::event::Event;
use super::method::MethodId;
use super::report::{BaselineError, BaselineReport, Detail};

/// The level of `event`: every interval carries it, none a baseline.
pub(crate) fn compute(event: &Event<'_>, level_kw: f64) -> Result<BaselineReport, BaselineError> {
    if !level_kw.is_finite() || level_kw < 0.0 {
        return Err(BaselineError::InvalidParameter {
            parameter: "level_kw",
            why: format!("{level_kw} kW is not a level a meter can be held at or under"),
        });
    }
    let mut report = event.report(
        MethodId::FirmServiceLevel,
        format!("firm service level {level_kw} kW: no baseline; compliance is the metered load at or under it"),
        Detail::FirmServiceLevel { level_kw },
        |_| None,
        |_| None,
    );
    for interval in &mut report.intervals {
        interval.firm_service_level_kw = Some(level_kw);
    }
    report.notes.push(format!(
        "no baseline: a firm service level of {level_kw} kW; compliance is the metered load at or under it in every \
         interval"
    ));
    Ok(report)
}
