//! The view options: one serializable struct with every knob of the timeline's look.

use serde::{Deserialize, Serialize};

/// How the timeline is drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ViewOptions {
    /// Height of one lane row, px (the most, when rows are fitted to the height).
    pub row_height: f32,
    /// Shrink rows (down to `min_row_height`) so that every lane fits the window's height.
    pub fit_rows: bool,
    /// The least row height when fitting, px.
    pub min_row_height: f32,
    /// Height of trace and group headers, px.
    pub header_height: f32,
    /// Height of the fusion bracket strip above kernel lanes, px.
    pub bracket_height: f32,
    /// Gap below each lane, px.
    pub lane_gap: f32,
    /// Gap between two traces, px.
    pub trace_gap: f32,
    /// Width of the lane label gutter, px.
    pub gutter_width: f32,
    /// Spans thinner than this are merged into blocks, px.
    pub merge_px: f32,
    /// Draw flows (host op -> kernel arrows).
    pub show_flows: bool,
    /// Most flows drawn per frame; beyond it only the selection's flows are drawn.
    pub max_flows: usize,
    /// Draw fusion group brackets over kernels.
    pub show_brackets: bool,
    /// Write span names inside spans wide enough.
    pub show_labels: bool,
    /// Shift each trace so that it starts at time 0 on the shared axis.
    pub align_starts: bool,
    /// Show the trace label bar even for a single trace.
    pub always_show_trace_header: bool,
    /// Zoom factor per W/S key press (below 1).
    pub key_zoom: f64,
    /// Pan per A/D key press, as a fraction of the view width.
    pub key_pan: f32,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            row_height: 18.0,
            fit_rows: true,
            min_row_height: 10.0,
            header_height: 20.0,
            bracket_height: 7.0,
            lane_gap: 2.0,
            trace_gap: 10.0,
            gutter_width: 130.0,
            merge_px: 1.0,
            show_flows: true,
            max_flows: 2000,
            show_brackets: true,
            show_labels: true,
            align_starts: true,
            always_show_trace_header: true,
            key_zoom: 0.8,
            key_pan: 0.15,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_and_fill_defaults() {
        let o = ViewOptions {
            show_flows: false,
            ..ViewOptions::default()
        };
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<ViewOptions>(&text).unwrap(), o);
        let partial: ViewOptions = serde_json::from_str(r#"{"row_height": 30}"#).unwrap();
        assert_eq!(partial.row_height, 30.0);
        assert!(partial.show_flows);
    }
}
