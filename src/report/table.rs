//! A plain text table: columns padded to their widest cell, two spaces apart.

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Rows of cells under a header, rendered with aligned columns.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles and alignments.
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            header: columns.iter().map(|(title, _)| title.to_string()).collect(),
            align: columns.iter().map(|&(_, align)| align).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.header.len(),
            "row {cells:?} does not match header {:?}",
            self.header
        );
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header line and every row, each ending in a newline, trailing
    /// spaces trimmed.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let mut out = String::new();
        for cells in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(&pad(cell, widths[i], self.align[i]));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for cells in &self.rows {
            for (width, cell) in widths.iter_mut().zip(cells) {
                *width = (*width).max(cell.chars().count());
            }
        }
        widths
    }
}

fn pad(cell: &str, width: usize, align: Align) -> String {
    match align {
        Align::Left => format!("{cell:<width$}"),
        Align::Right => format!("{cell:>width$}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut t = Table::new(&[("name", Align::Left), ("value", Align::Right)]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["longer".into(), "12345678".into()]);
        assert_eq!(
            t.render(),
            "name       value\na              1\nlonger  12345678\n"
        );
    }

    #[test]
    #[should_panic(expected = "does not match header")]
    fn a_short_row_is_a_bug() {
        let mut t = Table::new(&[("a", Align::Left), ("b", Align::Left)]);
        t.row(vec!["x".into()]);
    }
}
