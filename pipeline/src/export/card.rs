//! The export's dataset card, `README.md`: the Hugging Face Hub's YAML header (`configs`
//! pointing at the data file, `dataset_info` with the features and the row count; the license
//! left for the user to choose), then what a person needs before training on it: the model,
//! the sources, sampling, what the schema could not carry, and how to load and upload it.
//! The numbers are `provenance.json`'s.

use super::ExportOptions;
use super::provenance::Provenance;
use super::table::{Column, Kind};

/// The card for an export described by `provenance`.
pub(super) fn render(provenance: &Provenance, options: ExportOptions) -> String {
    let mut card = String::new();
    header(&mut card, provenance, options);
    body(&mut card, provenance, options);
    card
}

fn header(card: &mut String, provenance: &Provenance, options: ExportOptions) {
    let export = &provenance.export;
    card.push_str("---\n");
    card.push_str(
        "# license: choose the license your sources and the model's terms allow \
         (https://huggingface.co/docs/hub/repositories-licenses)\n",
    );
    card.push_str("tags:\n- synthetic\n- gen\n");
    card.push_str(&format!(
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {}\n",
        export.data_file
    ));
    card.push_str("dataset_info:\n  features:\n");
    for column in options.schema.columns() {
        feature(card, column);
    }
    card.push_str(&format!(
        "  splits:\n  - name: train\n    num_examples: {}\n---\n",
        export.rows
    ));
}

fn feature(card: &mut String, column: &Column) {
    card.push_str(&format!("  - name: {}\n", column.name));
    match column.kind {
        Kind::Text | Kind::OptionalText => card.push_str("    dtype: string\n"),
        Kind::Count => card.push_str("    dtype: int64\n"),
        Kind::Ids => card.push_str("    sequence: int64\n"),
        Kind::Turns(keys) => {
            card.push_str("    list:\n");
            for key in [Some(keys.role), Some(keys.content), keys.reasoning]
                .into_iter()
                .flatten()
            {
                card.push_str(&format!("    - name: {key}\n      dtype: string\n"));
            }
        }
    }
}

fn body(card: &mut String, provenance: &Provenance, options: ExportOptions) {
    let export = &provenance.export;
    let model = provenance.model.name.as_deref().unwrap_or("(not recorded)");
    card.push_str(&format!(
        "\n# `{}`: completions of `{model}` in the `{}` schema\n\n\
         Generated with `gen` {} from the run `{}`. Every number below is in \
         `provenance.json`.\n\n",
        provenance.run_id, export.schema, provenance.gen_version, provenance.run_id
    ));
    card.push_str(&format!(
        "- rows: {} in `{}`{}{}\n",
        export.rows,
        export.data_file,
        if options.per_turn {
            " (one row per assistant turn, reasoning only on the turn it answers)"
        } else {
            " (one row per prompt)"
        },
        if options.drop_cut {
            "; answers cut short left out"
        } else {
            "; answers cut short kept (`--keep-cut`)"
        }
    ));
    for (reason, count) in &export.dropped {
        card.push_str(&format!("- left out: {count} ({reason})\n"));
    }
    for server in &provenance.model.servers {
        card.push_str(&format!(
            "- server: `{}` serving `{}`{}, version {}\n",
            server.url,
            server.model,
            server
                .answered_by
                .as_ref()
                .map(|a| format!(" (answers name `{a}`)"))
                .unwrap_or_default(),
            server.version.as_deref().unwrap_or("not recorded")
        ));
    }
    if let Some(sampling) = &provenance.sampling {
        card.push_str(&format!("- sampling: `{sampling}`\n"));
    }

    card.push_str(
        "\n## Sources\n\n| source | repository | revision | system prompt | done | rejected | cut | exported |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for source in &provenance.sources {
        let generation = source.generation.as_ref();
        let count = |pick: fn(&super::provenance::GenerationFacts) -> u64| {
            generation.map_or_else(|| "-".to_owned(), |g| pick(g).to_string())
        };
        card.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            source.name,
            source.repo.as_deref().unwrap_or("local files"),
            source
                .commit
                .as_deref()
                .or(source.revision.as_deref())
                .unwrap_or("-"),
            source.system_prompt.as_str().unwrap_or("-"),
            count(|g| g.done),
            count(|g| g.rejected),
            count(|g| g.cut),
            source.exported_rows
        ));
    }

    if !export.not_carried.is_empty() {
        card.push_str(&format!(
            "\n## Not carried by the `{}` schema\n\n",
            export.schema
        ));
        for what in &export.not_carried {
            card.push_str(&format!("- {what}\n"));
        }
    }

    let format = match options.format {
        crate::cli::ExportFormat::Jsonl => "json",
        crate::cli::ExportFormat::Parquet => "parquet",
    };
    card.push_str(&format!(
        "\n## Use\n\n```python\nimport datasets\n\
         ds = datasets.load_dataset(\"{format}\", data_files=\"{}\", split=\"train\")\n```\n\n\
         Upload this folder as a dataset repository (choose a license in the header first):\n\n\
         ```sh\nhf upload USER/NAME . --repo-type dataset\n```\n",
        export.data_file
    ));
}
