"""The reward of `comlrl_pair.srpo`: the head's half and the tail's half, joined, against the word.

`joined(answer, row, episode)`: `answer` is the tail's half, the head's is read off the episode (the
event its agent `head` made on this path). 1.0 when the halves join into the word; else half the share
of the word's letters the joint gets right from its start (a pair that begins well earns some credit);
0.0 when either half is invalid.
"""


def _head(episode):
    for event in episode.events:
        if event.role == "head":
            member = event.members[0]
            return member.parsed if member.valid else None
    return None


def joined(answer, row, episode):
    head, word = _head(episode), row["word"]
    if head is None or answer is None:
        return 0.0
    joint = f"{head}{answer}".strip()
    if joint == word:
        return 1.0
    right = next((i for i, (a, b) in enumerate(zip(joint, word)) if a != b), min(len(joint), len(word)))
    return 0.5 * right / len(word)
