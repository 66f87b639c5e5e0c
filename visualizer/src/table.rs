//! A compact table widget: a header whose cells sort, rows painted directly (no widget per
//! cell) inside a scroll area that lays out only the visible rows, so a table of thousands of
//! names costs the rows on screen.

use eframe::egui::{
    self, Align2, Color32, FontId, Painter, Pos2, Rect, Sense, Shape, Stroke, Ui, pos2, vec2,
};

/// Row height, px.
pub const ROW_H: f32 = 17.0;
const HEADER_H: f32 = 20.0;
const PAD: f32 = 4.0;

/// One column.
#[derive(Clone, Copy, Debug)]
pub struct Col {
    /// Header text.
    pub title: &'static str,
    /// Width, px (0: takes what the others leave).
    pub width: f32,
    /// Right-aligned (numbers).
    pub right: bool,
    /// Hover text of the header.
    pub hint: &'static str,
    /// Columns with a higher number are dropped first when the table is too narrow.
    pub drop: u8,
}

impl Col {
    /// A left-aligned column that takes the remaining width.
    pub const fn name(title: &'static str, hint: &'static str) -> Col {
        Col {
            title,
            width: 0.0,
            right: false,
            hint,
            drop: 0,
        }
    }

    /// A right-aligned number column, dropped at level `drop` when space runs out.
    pub const fn num(title: &'static str, width: f32, drop: u8, hint: &'static str) -> Col {
        Col {
            title,
            width,
            right: true,
            hint,
            drop,
        }
    }
}

/// One cell's text and colour (`None`: the default text colour).
pub type Cell = (String, Option<Color32>);

/// What the user did with the table this frame.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TableResponse {
    /// A header was clicked (column index).
    pub sort: Option<usize>,
    /// A row was clicked.
    pub clicked: Option<usize>,
    /// A row was double-clicked.
    pub double_clicked: Option<usize>,
}

/// How a row's first cell starts: plain, or with a triangle to expand or collapse it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lead {
    /// Nothing.
    Plain,
    /// A member row, indented.
    Member,
    /// An expandable row, collapsed.
    Closed,
    /// An expandable row, expanded.
    Open,
}

/// The least width of the name column before number columns are dropped, px.
const MIN_NAME_W: f32 = 130.0;

/// Draws a table of `rows` rows. `cell(row, col)` gives each cell; `selected` rows are
/// highlighted; `sort` is the sorted column and whether ascending (for the header arrow);
/// `lead(row)` says how the first cell starts. Number columns are dropped (highest `drop`
/// first) while the name column would be narrower than 130 px.
#[allow(clippy::too_many_arguments)]
pub fn table(
    ui: &mut Ui,
    id: &str,
    cols: &[Col],
    sort: Option<(usize, bool)>,
    rows: usize,
    selected: &dyn Fn(usize) -> bool,
    lead: &dyn Fn(usize) -> Lead,
    cell: &mut dyn FnMut(usize, usize) -> Cell,
) -> TableResponse {
    let mut out = TableResponse::default();
    let width = ui.available_width().max(100.0);
    let mut level = cols.iter().map(|c| c.drop).max().unwrap_or(0);
    let shown = loop {
        let fixed: f32 = cols
            .iter()
            .filter(|c| c.drop <= level)
            .map(|c| c.width)
            .sum();
        if width - fixed >= MIN_NAME_W || level == 0 {
            break level;
        }
        level -= 1;
    };
    let fixed: f32 = cols
        .iter()
        .filter(|c| c.drop <= shown)
        .map(|c| c.width)
        .sum();
    let flex = cols.iter().filter(|c| c.width == 0.0).count().max(1) as f32;
    let flex_w = ((width - fixed) / flex).max(60.0);
    let widths: Vec<f32> = cols
        .iter()
        .map(|c| match c.width {
            _ if c.drop > shown => 0.0,
            0.0 => flex_w,
            w => w,
        })
        .collect();
    let visuals = ui.visuals().clone();
    let text = visuals.text_color();
    let font = FontId::proportional(11.5);

    // Header.
    let (hrect, _) = ui.allocate_exact_size(vec2(width, HEADER_H), Sense::hover());
    let painter = ui.painter_at(hrect);
    painter.rect_filled(hrect, 0.0, visuals.faint_bg_color);
    let mut x = hrect.min.x;
    for (ci, (c, w)) in cols.iter().zip(&widths).enumerate() {
        if *w == 0.0 {
            continue;
        }
        let r = Rect::from_min_size(pos2(x, hrect.min.y), vec2(*w, HEADER_H));
        let resp = ui
            .interact(r, ui.scope_id().with((id, "h", ci)), Sense::click())
            .on_hover_text(c.hint);
        if resp.clicked() {
            out.sort = Some(ci);
        }
        let sorted = sort.filter(|(s, _)| *s == ci);
        let r_text = if sorted.is_some() && c.right {
            Rect::from_min_max(r.min, pos2(r.max.x - 9.0, r.max.y))
        } else {
            r
        };
        cell_text(&painter, r_text, c.title, c.right, font.clone(), text);
        if let Some((_, asc)) = sorted {
            let tx = if c.right {
                r.max.x - 7.0
            } else {
                r.min.x + PAD + 7.5 * c.title.len() as f32
            };
            triangle(
                &painter,
                pos2(tx, r.center().y),
                if asc { Dir::Up } else { Dir::Down },
                text,
            );
        }
        x += w;
    }

    egui::ScrollArea::vertical()
        .id_salt(id)
        .auto_shrink([false, false])
        .show_rows(ui, ROW_H, rows, |ui, range| {
            for row in range {
                let (rect, resp) = ui.allocate_exact_size(vec2(width, ROW_H), Sense::click());
                let painter = ui.painter_at(rect);
                if selected(row) {
                    painter.rect_filled(rect, 0.0, visuals.selection.bg_fill);
                } else if resp.hovered() {
                    painter.rect_filled(rect, 0.0, visuals.widgets.hovered.weak_bg_fill);
                } else if row % 2 == 1 {
                    painter.rect_filled(rect, 0.0, visuals.faint_bg_color);
                }
                let mut x = rect.min.x;
                let lead = lead(row);
                for (ci, (c, w)) in cols.iter().zip(&widths).enumerate() {
                    if *w == 0.0 {
                        continue;
                    }
                    let shift = if ci == 0 && lead != Lead::Plain {
                        14.0
                    } else {
                        0.0
                    };
                    if ci == 0 && matches!(lead, Lead::Open | Lead::Closed) {
                        let at = pos2(x + PAD + 4.0, rect.center().y);
                        let dir = if lead == Lead::Open {
                            Dir::Down
                        } else {
                            Dir::Right
                        };
                        triangle(&painter, at, dir, text);
                    }
                    let r =
                        Rect::from_min_size(pos2(x + shift, rect.min.y), vec2(w - shift, ROW_H));
                    let (s, color) = cell(row, ci);
                    cell_text(
                        &painter,
                        r,
                        &s,
                        c.right,
                        font.clone(),
                        color.unwrap_or(text),
                    );
                    x += w;
                }
                if resp.clicked() {
                    out.clicked = Some(row);
                }
                if resp.double_clicked() {
                    out.double_clicked = Some(row);
                }
            }
        });
    out
}

fn cell_text(p: &egui::Painter, r: Rect, s: &str, right: bool, font: FontId, color: Color32) {
    let p = p.with_clip_rect(r.shrink2(vec2(1.0, 0.0)));
    if right {
        p.text(
            pos2(r.max.x - PAD, r.center().y),
            Align2::RIGHT_CENTER,
            s,
            font,
            color,
        );
    } else {
        p.text(
            pos2(r.min.x + PAD, r.center().y),
            Align2::LEFT_CENTER,
            s,
            font,
            color,
        );
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Up,
    Down,
    Right,
}

/// A small filled triangle centred at `c` (the font has no arrow glyphs).
fn triangle(p: &Painter, c: Pos2, dir: Dir, color: Color32) {
    let pts = match dir {
        Dir::Up => [c + vec2(-3.5, 2.0), c + vec2(3.5, 2.0), c + vec2(0.0, -2.5)],
        Dir::Down => [
            c + vec2(-3.5, -2.0),
            c + vec2(3.5, -2.0),
            c + vec2(0.0, 2.5),
        ],
        Dir::Right => [
            c + vec2(-2.0, -3.5),
            c + vec2(-2.0, 3.5),
            c + vec2(2.5, 0.0),
        ],
    };
    p.add(Shape::convex_polygon(pts.to_vec(), color, Stroke::NONE));
}
