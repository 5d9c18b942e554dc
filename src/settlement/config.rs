//! `[settlement]`: the demand-response programs the site is enrolled in, each with the baseline
//! method it is settled on, that method's holidays, and the prices for an estimated payment.
//!
//! ```toml
//! [[settlement.programs]]
//! name = "caiso-pdr"                 # matches an event's program (dr.event `program`, the
//!                                    # OpenADR program); `default = true` takes the others
//! baseline = { method = "caiso_10in10" }
//! holidays = ["california_tou"]      # default: the method's program's list
//! extra_holidays = ["2026-12-24"]    # days the program also treats as holidays
//! committed_kw = 500.0               # the reduction the site committed per event (optional)
//! price_per_mwh = 120.0              # paid per MWh delivered (optional: no payment estimate)
//! penalty_per_mwh = 0.0              # charged per MWh short of the commitment
//! default = true
//! ```
//!
//! The methods' pre-event windows (the day-of adjustment, the meter before) are kept free of
//! probe steps by the controller: a load lowered there lowers the baseline and the payment.

use chrono::NaiveDate;
use flexgate_policies::baseline::{HolidayCalendar, HolidaySet, Method};
use serde::{Deserialize, Serialize};

/// `[settlement]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SettlementConfig {
    /// The programs, by name.
    pub programs: Vec<ProgramConfig>,
}

/// One program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramConfig {
    /// Its name, as events name their program.
    pub name: String,
    /// The baseline method it settles on, with its parameters (`{ method = "nyiso_cbl",
    /// weather_sensitive = false }`, `{ method = "firm_service_level", level_kw = 800.0 }`).
    pub baseline: Method,
    /// Holiday lists (default: the method's program's).
    #[serde(default)]
    pub holidays: Vec<HolidaySet>,
    /// Days the program also treats as holidays.
    #[serde(default)]
    pub extra_holidays: Vec<NaiveDate>,
    /// Days of the lists the program does not treat as holidays.
    #[serde(default)]
    pub removed_holidays: Vec<NaiveDate>,
    /// The reduction committed per event, kW (absent: the event's own ask).
    #[serde(default)]
    pub committed_kw: Option<f64>,
    /// Paid per MWh delivered, for an estimated payment (absent: none estimated).
    #[serde(default)]
    pub price_per_mwh: Option<f64>,
    /// Charged per MWh short of the commitment (absent: no penalty estimated).
    #[serde(default)]
    pub penalty_per_mwh: Option<f64>,
    /// This program settles events that name no program, or one not listed.
    #[serde(default)]
    pub default: bool,
}

impl ProgramConfig {
    /// Its holiday calendar: the lists given (or the method's program's), with the days added
    /// and removed.
    #[must_use]
    pub fn calendar(&self) -> HolidayCalendar {
        let mut calendar = if self.holidays.is_empty() {
            crate::reports::baseline::default_holidays(self.baseline.id())
        } else {
            HolidayCalendar::of(&self.holidays)
        };
        for day in &self.extra_holidays {
            calendar = calendar.with_day(*day);
        }
        for day in &self.removed_holidays {
            calendar = calendar.without_day(*day);
        }
        calendar
    }
}

impl SettlementConfig {
    /// The program that settles an event of `program` (its name, or none): the one of that
    /// name, else the default one.
    #[must_use]
    pub fn program_for(&self, program: Option<&str>) -> Option<&ProgramConfig> {
        program
            .and_then(|p| self.programs.iter().find(|c| c.name == p))
            .or_else(|| self.programs.iter().find(|c| c.default))
    }

    /// The baseline methods of every program: the controller keeps probes out of their
    /// pre-event windows.
    #[must_use]
    pub fn methods(&self) -> Vec<Method> {
        self.programs.iter().map(|p| p.baseline.clone()).collect()
    }

    /// Range checks: names unique and non-empty, at most one default, prices and levels finite
    /// and not negative. The error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let mut defaults = 0;
        for (i, p) in self.programs.iter().enumerate() {
            let field = |f: &str| format!("settlement.programs[{i}].{f}");
            if p.name.trim().is_empty() || p.name.len() > 128 {
                return Err((field("name"), "must be 1 to 128 characters".into()));
            }
            if self.programs[..i].iter().any(|q| q.name == p.name) {
                return Err((field("name"), format!("{:?} is named twice", p.name)));
            }
            for (name, value) in [
                ("committed_kw", p.committed_kw),
                ("price_per_mwh", p.price_per_mwh),
                ("penalty_per_mwh", p.penalty_per_mwh),
            ] {
                if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                    return Err((field(name), "must be a number of at least 0".into()));
                }
            }
            if let Method::FirmServiceLevel { level_kw } = p.baseline
                && !(level_kw.is_finite() && level_kw >= 0.0)
            {
                return Err((field("baseline.level_kw"), "must be a number of kW, at least 0".into()));
            }
            defaults += usize::from(p.default);
        }
        if defaults > 1 {
            return Err((
                "settlement.programs".into(),
                "at most one program may be the default".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commented example of deploy/flexgate.toml loads once uncommented.
    #[test]
    fn the_shipped_example_loads() {
        let shipped = include_str!("../../deploy/flexgate.toml");
        let block: String = shipped
            .lines()
            .skip_while(|l| !l.starts_with("# [[settlement.programs]]"))
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .filter(|l| !l.trim_start().starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let config = crate::config::Config::parse(&block).expect("the example parses");
        config.validate().expect("the example is valid");
        let program = config.settlement.program_for(None).expect("a default program");
        assert_eq!(program.baseline, Method::Caiso10In10);
        assert_eq!(program.price_per_mwh, Some(120.0));
    }

    #[test]
    fn programs_parse_with_their_methods_and_refuse_what_cannot_be() {
        let text = r#"
            [[programs]]
            name = "caiso-pdr"
            baseline = { method = "caiso_10in10" }
            price_per_mwh = 120.0
            default = true

            [[programs]]
            name = "fsl"
            baseline = { method = "firm_service_level", level_kw = 800.0 }
            extra_holidays = ["2026-12-24"]
        "#;
        let c: SettlementConfig = toml::from_str(text).expect("parses");
        c.validate().expect("valid");
        assert_eq!(c.program_for(Some("fsl")).map(|p| p.name.as_str()), Some("fsl"));
        assert_eq!(c.program_for(Some("other")).map(|p| p.name.as_str()), Some("caiso-pdr"));
        assert_eq!(c.program_for(None).map(|p| p.name.as_str()), Some("caiso-pdr"));
        let fsl = c.program_for(Some("fsl")).expect("fsl");
        assert!(
            fsl.calendar()
                .is_holiday(NaiveDate::from_ymd_opt(2026, 12, 24).expect("date"))
        );
        let mut twice = c.clone();
        twice.programs[1].default = true;
        assert!(twice.validate().is_err());
        let mut negative = c.clone();
        negative.programs[0].price_per_mwh = Some(-1.0);
        assert_eq!(
            negative.validate().map_err(|e| e.0),
            Err("settlement.programs[0].price_per_mwh".to_string())
        );
        assert!(
            toml::from_str::<SettlementConfig>("[[programs]]\nname = \"x\"\nbaseline = { method = \"guess\" }\n")
                .is_err()
        );
    }
}
