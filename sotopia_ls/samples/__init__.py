"""Real Sotopia data shipped with the package: the demo's episodes and the tests' sample set.

``SAMPLES`` is the folder; its README gives each file's provenance and licence. ``DEMO`` lists
the episodes ``sotopia-ls up`` imports when given no paths: one file of each input format.
"""

from __future__ import annotations

from pathlib import Path

SAMPLES = Path(__file__).resolve().parent

OTREE_EPISODES = SAMPLES / "otree_episodes"
HUMAN_EVAL = SAMPLES / "human_eval"
EPISODELOG = SAMPLES / "episodelog" / "fixture_episode.json"
DUMP = SAMPLES / "hf_jsonl" / "episode_tuple_rewards.jsonl"

DEMO: tuple[Path, ...] = (
    OTREE_EPISODES / "GPT3.5-MistralInstruct" / "01HNBF16SEGD1033KGXQ67BDJV.json",
    OTREE_EPISODES / "GPT3.5-GPT3.5" / "01H8ZG8A8JW5Z9RSH3G3H5MEN4.json",
    EPISODELOG,
    DUMP,
)
