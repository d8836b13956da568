//! Words for the shell scripts tinyperf writes (a package's `run_and_time.sh`): every word
//! that comes from a run (its suite, option names and values, paths) passes through
//! [`quote`], so that no value can end a word, start a command or expand.

/// A word no shell command can carry: it holds a NUL byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} holds a NUL byte, which no shell command can carry")]
pub struct NulInWord(pub String);

/// `word` as one POSIX shell word: as it is when it is made only of characters no shell
/// treats specially, else in single quotes with each `'` written `'\''`.
pub fn quote(word: &str) -> Result<String, NulInWord> {
    if word.contains('\0') {
        return Err(NulInWord(word.to_string()));
    }
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        return Ok(word.to_string());
    }
    Ok(format!("'{}'", word.replace('\'', r"'\''")))
}

/// `words` quoted and joined by spaces: one command line.
pub fn command(words: &[&str]) -> Result<String, NulInWord> {
    Ok(words
        .iter()
        .map(|w| quote(w))
        .collect::<Result<Vec<_>, _>>()?
        .join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What `sh` makes of `line` after `printf '%s\0'`: the words it received.
    fn words_sh_sees(line: &str) -> Vec<String> {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_terminator('\0').map(str::to_string).collect()
    }

    #[test]
    fn hostile_words_reach_the_command_whole_and_run_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("PWNED");
        let marker = marker.to_str().unwrap();
        let hostile = [
            format!("/some/ds'; touch {marker}; echo '"),
            format!("$(touch {marker})"),
            format!("`touch {marker}`"),
            format!("a\"b; touch {marker}"),
            "line one\nline two".to_string(),
            "*".to_string(),
            "~root".to_string(),
            "$HOME ${PATH}".to_string(),
            "".to_string(),
            "-o".to_string(),
            "\\'\\".to_string(),
            "\u{1b}[2J ünïcode".to_string(),
        ];
        let words: Vec<&str> = hostile.iter().map(String::as_str).collect();
        let line = command(&words).unwrap();
        assert_eq!(words_sh_sees(&line), hostile);
        assert!(!std::path::Path::new(marker).exists());
    }

    #[test]
    fn plain_words_stay_plain_and_a_nul_is_refused() {
        assert_eq!(quote("seed=3").unwrap(), "seed=3");
        assert_eq!(quote("/var/lib/tinyperf").unwrap(), "/var/lib/tinyperf");
        assert_eq!(quote("it's").unwrap(), r"'it'\''s'");
        assert!(quote("a\0b").is_err());
    }
}
