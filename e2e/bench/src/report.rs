//! The benchmark's table: each figure beside its floor from the same run, the ratio, and the
//! goal it is held to; printed as it grows and written as Markdown.

use std::fmt::Write as _;

/// What a figure is held to.
#[derive(Debug, Clone, Copy)]
pub enum Goal {
    /// keeper / floor at most this.
    RatioAtMost(f64),
    /// keeper / floor at least this.
    RatioAtLeast(f64),
    /// keeper's value at most this.
    AtMost(f64),
    /// keeper's value exactly this.
    Exactly(f64),
    /// Reported, not judged.
    None,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub section: String,
    pub figure: String,
    pub keeper: f64,
    pub floor: Option<f64>,
    pub unit: &'static str,
    pub goal: Goal,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        self.floor.filter(|f| *f > 0.0).map(|f| self.keeper / f)
    }

    pub fn met(&self) -> Option<bool> {
        match self.goal {
            Goal::RatioAtMost(max) => self.ratio().map(|r| r <= max),
            Goal::RatioAtLeast(min) => self.ratio().map(|r| r >= min),
            Goal::AtMost(max) => Some(self.keeper <= max),
            Goal::Exactly(v) => Some((self.keeper - v).abs() < 1e-9),
            Goal::None => None,
        }
    }

    fn goal_text(&self) -> String {
        match self.goal {
            Goal::RatioAtMost(v) => format!("≤ {v}×"),
            Goal::RatioAtLeast(v) => format!("≥ {v}×"),
            Goal::AtMost(v) => format!("≤ {}", number(v)),
            Goal::Exactly(v) => format!("= {}", number(v)),
            Goal::None => String::new(),
        }
    }
}

fn number(v: f64) -> String {
    if (v == v.trunc() && v.abs() < 1e15) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Free-text lines printed under the table (breakdowns, settings).
    pub notes: Vec<String>,
}

impl Report {
    pub fn add(
        &mut self,
        section: &str,
        figure: impl Into<String>,
        keeper: f64,
        floor: Option<f64>,
        unit: &'static str,
        goal: Goal,
    ) {
        let row = Row {
            section: section.to_string(),
            figure: figure.into(),
            keeper,
            floor,
            unit,
            goal,
        };
        println!("{}", render_row(&row));
        self.rows.push(row);
    }

    pub fn note(&mut self, line: impl Into<String>) {
        let line = line.into();
        println!("  {line}");
        self.notes.push(line);
    }

    pub fn table(&self) -> String {
        let mut out = String::from(
            "| section | figure | keeper | floor | keeper/floor | goal | met |\n|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let _ = writeln!(out, "{}", render_row(row));
        }
        out
    }

    pub fn failures(&self) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|r| r.met() == Some(false))
            .collect()
    }
}

fn render_row(row: &Row) -> String {
    let unit = |v: f64| {
        if row.unit.is_empty() {
            number(v)
        } else {
            format!("{} {}", number(v), row.unit)
        }
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} |",
        row.section,
        row.figure,
        unit(row.keeper),
        row.floor.map(unit).unwrap_or_default(),
        row.ratio().map(|r| format!("{r:.2}×")).unwrap_or_default(),
        row.goal_text(),
        match row.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        }
    )
}

/// The machine the figures were measured on: CPU model and count, memory, kernel.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    format!("{cores} cores ({model}), {mem_gib:.0} GiB RAM")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(keeper: f64, floor: Option<f64>, goal: Goal) -> Row {
        Row {
            section: "s".into(),
            figure: "f".into(),
            keeper,
            floor,
            unit: "s",
            goal,
        }
    }

    #[test]
    fn goals_judge_the_ratio_or_the_value() {
        assert_eq!(
            row(0.9, Some(1.0), Goal::RatioAtMost(1.0)).met(),
            Some(true)
        );
        assert_eq!(
            row(1.1, Some(1.0), Goal::RatioAtMost(1.0)).met(),
            Some(false)
        );
        assert_eq!(
            row(2.0, Some(1.0), Goal::RatioAtLeast(1.0)).met(),
            Some(true)
        );
        assert_eq!(
            row(0.5, Some(1.0), Goal::RatioAtLeast(1.0)).met(),
            Some(false)
        );
        // No floor measured: a ratio goal cannot be judged.
        assert_eq!(row(0.5, None, Goal::RatioAtMost(1.0)).met(), None);
        assert_eq!(row(64.0, None, Goal::AtMost(64.0)).met(), Some(true));
        assert_eq!(row(3.0, None, Goal::Exactly(3.0)).met(), Some(true));
        assert_eq!(row(4.0, None, Goal::Exactly(3.0)).met(), Some(false));
        assert_eq!(row(4.0, None, Goal::None).met(), None);
    }

    #[test]
    fn the_table_shows_ratios_and_marks_missed_goals() {
        let mut report = Report::default();
        report.add(
            "buckets",
            "100 to Ready",
            2.0,
            Some(1.0),
            "s",
            Goal::RatioAtMost(1.0),
        );
        report.add("buckets", "GETs", 0.0, None, "", Goal::AtMost(0.1));
        let table = report.table();
        assert!(
            table.contains("| buckets | 100 to Ready | 2 s | 1 s | 2.00× | ≤ 1× | **no** |"),
            "{table}"
        );
        assert!(
            table.contains("| buckets | GETs | 0 |  |  | ≤ 0.100 | yes |"),
            "{table}"
        );
        assert_eq!(report.failures().len(), 1);
    }
}
