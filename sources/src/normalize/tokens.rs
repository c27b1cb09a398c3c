//! The token-length filter: `min-prompt-tokens` / `max-prompt-tokens`, measured with a Hugging
//! Face `tokenizer.json`.
//!
//! What is counted: the prompt as sent, after every other rule (turn selection, system policy,
//! template): the sum over its messages (system turn included) of the tokens of the message's
//! content, each encoded on its own without special tokens. The chat template's tokens (role
//! headers, BOS) are not counted: they depend on the server's template, not on the data.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::{DropReason, Turn};

/// A loaded tokenizer and the bounds it enforces.
pub struct TokenFilter {
    tokenizer: Tokenizer,
    min: usize,
    max: usize,
}

/// The tokenizer file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load tokenizer `{}`: {message}", path.display())]
pub struct TokenizerError {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Debug for TokenFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFilter")
            .field("min", &self.min)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl TokenFilter {
    /// Loads `path`; `min`/`max` default to no bound.
    pub fn load(
        path: &Path,
        min: Option<usize>,
        max: Option<usize>,
    ) -> Result<TokenFilter, TokenizerError> {
        let error = |message: String| TokenizerError {
            path: path.to_path_buf(),
            message,
        };
        if !path.is_file() {
            return Err(error("no such file".to_owned()));
        }
        let tokenizer = Tokenizer::from_file(path).map_err(|e| error(e.to_string()))?;
        Ok(TokenFilter {
            tokenizer,
            min: min.unwrap_or(0),
            max: max.unwrap_or(usize::MAX),
        })
    }

    /// The number of tokens of a prompt (see the module documentation).
    pub fn count<'t>(&self, contents: impl IntoIterator<Item = &'t str>) -> Result<usize, String> {
        let mut tokens = 0;
        for content in contents {
            let encoding = self
                .tokenizer
                .encode_fast(content, false)
                .map_err(|e| e.to_string())?;
            tokens += encoding.len();
        }
        Ok(tokens)
    }

    /// Drops a prompt outside the bounds.
    pub(crate) fn check(&self, turns: &[Turn<'_>]) -> Result<(), DropReason> {
        let tokens = self
            .count(turns.iter().map(|t| t.content.as_ref()))
            .map_err(DropReason::TokenizerFailed)?;
        if tokens < self.min {
            return Err(DropReason::TooFewTokens {
                tokens,
                min: self.min,
            });
        }
        if tokens > self.max {
            return Err(DropReason::TooManyTokens {
                tokens,
                max: self.max,
            });
        }
        Ok(())
    }
}

/// Trains a word-level tokenizer (whitespace and punctuation pre-tokenizer, `<unk>` for words
/// outside `corpus`) and saves it as a real `tokenizer.json`: each word or punctuation run is
/// one token.
#[cfg(test)]
pub(crate) fn write_test_tokenizer(path: &Path, corpus: &[&str]) {
    use tokenizers::AddedToken;
    use tokenizers::models::TrainerWrapper;
    use tokenizers::models::wordlevel::{WordLevel, WordLevelTrainer};
    use tokenizers::pre_tokenizers::whitespace::Whitespace;

    let mut tokenizer = Tokenizer::new(WordLevel::default());
    tokenizer.with_pre_tokenizer(Some(Whitespace));
    let mut trainer: TrainerWrapper = WordLevelTrainer::builder()
        .show_progress(false)
        .special_tokens(vec![AddedToken::from("<unk>", true)])
        .build()
        .expect("trainer")
        .into();
    tokenizer.train(&mut trainer, corpus.iter()).expect("train");
    tokenizer.save(path, false).expect("save");
}
