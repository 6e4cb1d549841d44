"""Screening: what judges a participant's ratings. The gold episodes and their reference
ratings, the qualification round and its verdicts, the quality flags and what they read (time on
task, characters typed and pasted), and the review file in which the researcher decides. One
room, as Potato keeps its quality control in one module, so that a check is found in one place."""
