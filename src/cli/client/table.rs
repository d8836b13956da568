//! Plain text tables with aligned columns.

use crate::cli::printable::printable;

/// Rows of cells under a header, each column as wide as its widest cell.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; each cell is shown [`printable`]: a value from a record cannot move
    /// the terminal's cursor or start a row of its own.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| printable(&c).into_owned())
                .collect(),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key  value` lines with the values aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, value) in pairs {
        out.push_str(&format!("{key:<width$}  {}\n", printable(value)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut t = Table::new(&["ID", "STATE"]);
        t.row(vec!["a-long-id".into(), "passed".into()]);
        t.row(vec!["b".into(), "failed".into()]);
        assert_eq!(
            t.render(),
            "ID         STATE\na-long-id  passed\nb          failed\n"
        );
    }

    #[test]
    fn fields_align_values() {
        assert_eq!(
            fields(&[("state", "idle".into()), ("version", "1".into())]),
            "state    idle\nversion  1\n"
        );
    }
}
