//! The stream of random choices every generator draws from.
//!
//! A generated schema or query is a pure function of the choices it drew, so
//! a case is replayed from its recorded choices and shrunk by editing them
//! (as Hypothesis shrinks its choice sequences): `run.rs`'s `reduce` deletes or
//! lowers recorded choices and generates again. Generators therefore make
//! choice `0` the simplest option (no join, no WHERE, stop recursing), and a
//! replayed stream that runs out answers `0` from then on, so every edit of
//! a stream still generates a valid, usually smaller, case.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Where choices come from.
enum Source {
    /// Fresh random choices, recorded as they are drawn.
    Random(ChaCha8Rng),
    /// A recorded stream replayed; past its end every choice is 0.
    Replay { position: usize },
}

/// A stream of bounded random choices (see the module documentation).
pub struct Choices {
    source: Source,
    recorded: Vec<u32>,
}

impl Choices {
    /// Fresh choices from `seed`: the same seed always gives the same stream.
    pub fn random(seed: u64) -> Choices {
        Choices { source: Source::Random(ChaCha8Rng::seed_from_u64(seed)), recorded: Vec::new() }
    }

    /// Replays `recorded`.
    pub fn replay(recorded: Vec<u32>) -> Choices {
        Choices { source: Source::Replay { position: 0 }, recorded }
    }

    /// The choices drawn so far (a random stream) or the stream replayed.
    pub fn recorded(&self) -> &[u32] {
        &self.recorded
    }

    /// The choices actually drawn, for a replayed stream only those it read.
    pub fn used(&self) -> Vec<u32> {
        match self.source {
            Source::Random(_) => self.recorded.clone(),
            Source::Replay { position } => self.recorded[..position.min(self.recorded.len())].to_vec(),
        }
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u32) -> u32 {
        if n <= 1 {
            // Still recorded, so positions in the stream do not depend on
            // how many options a choice happened to have.
            self.draw(1);
            return 0;
        }
        self.draw(n) % n
    }

    fn draw(&mut self, n: u32) -> u32 {
        match &mut self.source {
            Source::Random(rng) => {
                let value = rng.random_range(0..n.max(1));
                self.recorded.push(value);
                value
            }
            Source::Replay { position } => {
                let value = self.recorded.get(*position).copied().unwrap_or(0);
                *position += 1;
                value
            }
        }
    }

    /// True with about `percent` percent chance; false is the simple answer.
    pub fn chance(&mut self, percent: u32) -> bool {
        // Drawn as "not below", so a shrunk (zeroed) choice means false.
        self.below(100) >= 100 - percent.min(100)
    }

    /// One of `items` (the first is the simplest).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        let index = self.below(items.len() as u32) as usize;
        &items[index.min(items.len().saturating_sub(1))]
    }

    /// A number in `low..=high`, `low` being the simplest.
    pub fn between(&mut self, low: u32, high: u32) -> u32 {
        low + self.below(high.saturating_sub(low) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_stream_gives_the_same_choices_and_zero_past_its_end() {
        let mut random = Choices::random(7);
        let drawn: Vec<u32> = (0..50).map(|i| random.below(i % 9 + 2)).collect();
        let mut replay = Choices::replay(random.recorded().to_vec());
        let again: Vec<u32> = (0..50).map(|i| replay.below(i % 9 + 2)).collect();
        assert_eq!(drawn, again);
        assert_eq!(replay.below(5), 0);
        assert!(!replay.chance(99), "a choice past the end is the simple one");
        assert_eq!(replay.used().len(), 50, "only the recorded choices count as used");
    }

    #[test]
    fn the_same_seed_draws_the_same_stream_and_another_seed_another() {
        let draw = |seed| {
            let mut c = Choices::random(seed);
            (0..20).map(|_| c.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }
}
