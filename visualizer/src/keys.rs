//! Keyboard navigation as Perfetto users know it, as a pure mapping from egui's input to
//! [`Action`]s (so it is tested without a window):
//!
//! | keys | action |
//! |---|---|
//! | W / S (held: continuous), ↑ / ↓ | zoom in / out about the pointer |
//! | A / D (held: continuous), ← / → | pan left / right |
//! | F | zoom to the selected span (fit everything when none) |
//! | Home, 0 | fit everything |
//! | M | mark the selected span's time range |
//! | Enter / Shift+Enter | next / previous search match (or profile row span) |
//! | / or Ctrl+F | focus the search box |
//! | ] / [ | follow the selected span's flow forward / backward |
//! | Esc | clear the selection, then the range, then the search |
//! | ? | show or hide the key list |
//!
//! Holding W/S zooms by [`crate::ViewOptions::key_zoom`] per 1/8 s, A/D pans by
//! [`crate::ViewOptions::key_pan`] of the view per 1/8 s; a press moves at least one step.

use eframe::egui::{InputState, Key, Modifiers};

/// What the keys asked for in one frame.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Action {
    /// Zoom factor on the time span (below 1: in), 1 when none.
    pub zoom: f64,
    /// Pan in units of the view width (positive: later times).
    pub pan: f64,
    /// Zoom to the selection (or fit everything).
    pub focus: bool,
    /// Fit everything.
    pub fit: bool,
    /// Mark the selection's range.
    pub mark: bool,
    /// Step through marks: `Some(true)` next, `Some(false)` previous.
    pub step: Option<bool>,
    /// Focus the search box.
    pub search: bool,
    /// Follow a flow: `Some(true)` forward, `Some(false)` backward.
    pub follow: Option<bool>,
    /// Clear (Esc).
    pub clear: bool,
    /// Toggle the key list.
    pub help: bool,
    /// Whether keys are held, so the next frame should come soon.
    pub held: bool,
}

/// Key repeat period for held W/S/A/D, s.
const STEP_S: f64 = 0.125;

/// Reads the keys of one frame. `key_zoom` is the zoom factor of one step (below 1),
/// `key_pan` the pan of one step as a share of the view.
pub fn read_keys(i: &InputState, key_zoom: f64, key_pan: f64) -> Action {
    let dt = f64::from(i.stable_dt).clamp(0.0, 0.1);
    let plain = |k: Key| i.key_pressed(k) && !i.modifiers.command && !i.modifiers.alt;
    // A press moves one step; a key held since an earlier frame moves continuously.
    let amount = |keys: &[Key]| -> f64 {
        if keys.iter().any(|&k| plain(k)) {
            1.0
        } else if keys.iter().any(|&k| i.key_down(k)) && !i.modifiers.command {
            dt / STEP_S
        } else {
            0.0
        }
    };
    let zin = amount(&[Key::W, Key::ArrowUp]);
    let zout = amount(&[Key::S, Key::ArrowDown]);
    let left = amount(&[Key::A, Key::ArrowLeft]);
    let right = amount(&[Key::D, Key::ArrowRight]);
    let held = [Key::W, Key::S, Key::A, Key::D]
        .iter()
        .any(|&k| i.key_down(k));
    let shift = i.modifiers.shift;
    Action {
        zoom: key_zoom.powf(zin - zout),
        pan: (right - left) * key_pan,
        focus: plain(Key::F),
        fit: plain(Key::Home) || plain(Key::Num0),
        mark: plain(Key::M),
        step: i.key_pressed(Key::Enter).then_some(!shift),
        search: plain(Key::Slash)
            || (i.key_pressed(Key::F) && i.modifiers.matches_logically(Modifiers::COMMAND)),
        follow: if plain(Key::CloseBracket) {
            Some(true)
        } else if plain(Key::OpenBracket) {
            Some(false)
        } else {
            None
        },
        clear: i.key_pressed(Key::Escape),
        help: plain(Key::Questionmark),
        held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eframe::egui::{Context, Event, RawInput};

    /// Runs one frame with `events` and returns what the keys asked for.
    fn keys(events: Vec<Event>, modifiers: Modifiers) -> Action {
        let ctx = Context::default();
        let mut out = Action::default();
        let mut all = vec![Event::ModifiersChanged(modifiers)];
        all.extend(events);
        let input = RawInput {
            events: all,
            ..RawInput::default()
        };
        let mut frame = ctx.run_ui(input, |ui| {
            out = ui.input(|i| read_keys(i, 0.8, 0.15));
        });
        // No painter applies the font atlas here: drop it deliberately (epaint checks in debug).
        frame.textures_delta.clear();
        out
    }

    fn press(k: Key, modifiers: Modifiers) -> Event {
        Event::Key {
            key: k,
            physical_key: None,
            pressed: true,
            repeat: false,
            modifiers,
        }
    }

    #[test]
    fn wasd_zoom_and_pan_one_step_per_press() {
        let a = keys(vec![press(Key::W, Modifiers::NONE)], Modifiers::NONE);
        assert!((a.zoom - 0.8).abs() < 1e-12 && a.pan == 0.0 && a.held);
        let a = keys(vec![press(Key::S, Modifiers::NONE)], Modifiers::NONE);
        assert!((a.zoom - 1.25).abs() < 1e-12);
        let a = keys(vec![press(Key::D, Modifiers::NONE)], Modifiers::NONE);
        assert!((a.pan - 0.15).abs() < 1e-12 && a.zoom == 1.0);
        let a = keys(
            vec![press(Key::ArrowLeft, Modifiers::NONE)],
            Modifiers::NONE,
        );
        assert!((a.pan + 0.15).abs() < 1e-12);
        // Nothing pressed: nothing asked.
        assert_eq!(keys(vec![], Modifiers::NONE).zoom, 1.0);
    }

    #[test]
    fn navigation_keys() {
        assert!(keys(vec![press(Key::F, Modifiers::NONE)], Modifiers::NONE).focus);
        assert!(keys(vec![press(Key::Home, Modifiers::NONE)], Modifiers::NONE).fit);
        assert!(keys(vec![press(Key::M, Modifiers::NONE)], Modifiers::NONE).mark);
        assert_eq!(
            keys(vec![press(Key::Enter, Modifiers::NONE)], Modifiers::NONE).step,
            Some(true)
        );
        assert_eq!(
            keys(vec![press(Key::Enter, Modifiers::SHIFT)], Modifiers::SHIFT).step,
            Some(false)
        );
        let ctrl_f = keys(vec![press(Key::F, Modifiers::COMMAND)], Modifiers::COMMAND);
        assert!(ctrl_f.search && !ctrl_f.focus);
        assert!(keys(vec![press(Key::Slash, Modifiers::NONE)], Modifiers::NONE).search);
        assert_eq!(
            keys(
                vec![press(Key::CloseBracket, Modifiers::NONE)],
                Modifiers::NONE
            )
            .follow,
            Some(true)
        );
        assert!(keys(vec![press(Key::Escape, Modifiers::NONE)], Modifiers::NONE).clear);
    }
}
