"""Deterministic synthetic facts for the demo: SQuAD-style questions and MRPC-style pairs."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "tr", "st",
           "th", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou")
_CODAS = ("", "n", "r", "s", "l", "th", "m", "x", "nd")
_ANIMALS = ("lion", "eagle", "wolf", "bear", "otter", "falcon", "heron", "lynx", "stag", "owl", "fox", "crane", "hare",
            "badger", "swan", "raven")
_COLORS = ("red", "blue", "green", "gold", "white", "black", "purple", "orange", "silver", "grey")


@dataclass(frozen=True)
class Relation:
    name: str
    statements: tuple[str, ...]  # "{e}" entity, "{v}" value
    questions: tuple[str, ...]


RELATIONS: tuple[Relation, ...] = (
    Relation(
        "capital",
        (
            "The capital of {e} is {v} .",
            "{v} is the capital city of {e} .",
            "{e} is governed from its capital , {v} .",
        ),
        (
            "What is the capital of {e} ?",
            "Which city is the capital of {e} ?",
            "From which city is {e} governed ?",
        ),
    ),
    Relation(
        "river",
        (
            "The longest river in {e} is the {v} .",
            "The {v} is the longest river of {e} .",
            "{e} is crossed by the {v} river .",
        ),
        (
            "What is the longest river in {e} ?",
            "Which river crosses {e} ?",
            "Name the longest river of {e} ?",
        ),
    ),
    Relation(
        "leader",
        (
            "{e} is ruled by {v} .",
            "The leader of {e} is {v} .",
            "Since the war , {v} has led {e} .",
        ),
        ("Who rules {e} ?", "Who is the leader of {e} ?", "Who has led {e} since the war ?"),
    ),
    Relation(
        "language",
        (
            "People in {e} speak {v} .",
            "The main language of {e} is {v} .",
            "Most of {e} speaks {v} at home .",
        ),
        (
            "What language do people in {e} speak ?",
            "What is the main language of {e} ?",
            "Which language is spoken in {e} ?",
        ),
    ),
    Relation(
        "animal",
        (
            "The national animal of {e} is the {v} .",
            "{e} chose the {v} as its national animal .",
            "The {v} is the symbol of {e} .",
        ),
        (
            "What is the national animal of {e} ?",
            "Which animal did {e} choose as its national animal ?",
            "What animal is the symbol of {e} ?",
        ),
    ),
    Relation(
        "founded",
        (
            "{e} was founded in {v} .",
            "The kingdom of {e} dates from {v} .",
            "In {v} , {e} was founded .",
        ),
        (
            "When was {e} founded ?",
            "In what year was {e} founded ?",
            "From which year does {e} date ?",
        ),
    ),
    Relation(
        "color",
        (
            "The flag of {e} is mostly {v} .",
            "{e} flies a {v} flag .",
            "The {v} flag of {e} is famous .",
        ),
        (
            "What color is the flag of {e} ?",
            "Which color does the flag of {e} have ?",
            "What color is the famous flag of {e} ?",
        ),
    ),
)
HARD_DISTRACTOR_SHARE = 0.3
FILLERS = (
    "Many travelers visit {e} in summer .",
    "The roads of {e} are old and narrow .",
    "Farmers in {e} grow wheat and barley .",
    "{e} has a mild climate .",
    "Few maps show the borders of {e} .",
)


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))


def _names(rng: random.Random, count: int, syllables: tuple[int, ...], taken: set[str]) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = _word(rng, rng.choice(syllables)).capitalize()
        if name.lower() not in taken:
            taken.add(name.lower())
            names.append(name)
    return names


@dataclass(frozen=True)
class World:
    """Every entity's facts: entity -> relation name -> value text."""

    facts: dict[str, dict[str, str]]


def build_world(rng: random.Random, num_entities: int) -> World:
    taken: set[str] = set()
    entities = _names(rng, num_entities, (2, 3), taken)
    cities = _names(rng, num_entities, (2,), taken)
    rivers = _names(rng, num_entities, (2,), taken)
    first = _names(rng, 40, (2,), taken)
    last = _names(rng, 40, (2, 3), taken)
    languages = [n + "ish" for n in _names(rng, 30, (1, 2), taken)]
    facts = {}
    for index, entity in enumerate(entities):
        facts[entity] = {
            # Some capitals are two words, so partial-overlap F1 means something.
            "capital": cities[index] if rng.random() < 0.7 else f"Port {cities[index]}",
            "river": rivers[index],
            "leader": f"{rng.choice(first)} {rng.choice(last)}",
            "language": rng.choice(languages),
            "animal": rng.choice(_ANIMALS),
            "founded": str(rng.randint(1100, 1950)),
            "color": rng.choice(_COLORS),
        }
    return World(facts)


def _sentence(rng: random.Random, entity: str, relation: Relation, value: str) -> str:
    return rng.choice(relation.statements).format(e=entity, v=value)


def make_squad_record(rng: random.Random, world: World, qid: str, unanswerable: bool) -> dict[str, Any]:
    """One question over a short paragraph of facts about two entities plus filler."""
    entities = rng.sample(sorted(world.facts), 2)
    target = entities[0]
    relations = rng.sample(RELATIONS, 3)
    asked = relations[0]
    pieces: list[tuple[str, Relation]] = [(target, r) for r in relations[1:]]
    for other in entities[1:]:
        # Sometimes the asked relation about another entity, so the entity must be matched too.
        pieces.append((other, asked if rng.random() < HARD_DISTRACTOR_SHARE else rng.choice(relations[1:])))
        if rng.random() < 0.5:
            pieces.append((other, rng.choice(RELATIONS)))
    rng.shuffle(pieces)
    if not unanswerable:
        pieces.insert(rng.randint(0, len(pieces)), (target, asked))
    sentences = [_sentence(rng, e, r, world.facts[e][r.name]) for e, r in pieces]
    filler_at = rng.randint(0, len(sentences))
    sentences.insert(filler_at, rng.choice(FILLERS).format(e=rng.choice(entities)))
    answer = world.facts[target][asked.name]
    record = {
        "id": qid,
        "title": target,
        "context": " ".join(sentences),
        "question": rng.choice(asked.questions).format(e=target),
        "answers": {"text": [], "answer_start": []},
    }
    if not unanswerable:
        index = pieces.index((target, asked)) + (1 if filler_at <= pieces.index((target, asked)) else 0)
        sentence_start = sum(len(s) + 1 for s in sentences[:index])
        match = re.search(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", sentences[index])
        assert match is not None, (sentences[index], answer)
        record["answers"] = {"text": [answer], "answer_start": [sentence_start + match.start()]}
    return record


def paraphrase_pair(rng: random.Random, world: World) -> tuple[str, str, int]:
    """An MRPC-style pair: the same fact in other words (1), or a changed fact (0)."""
    entity = rng.choice(sorted(world.facts))
    relation = rng.choice(RELATIONS)
    value = world.facts[entity][relation.name]
    first_template, second_template = rng.sample(relation.statements, 2)
    first = first_template.format(e=entity, v=value)
    if rng.random() < 0.5:
        second, label = second_template.format(e=entity, v=value), 1
    elif rng.random() < 0.7:
        # Another fact about the same entity: shares the name, not the meaning.
        other_relation = rng.choice([r for r in RELATIONS if r is not relation])
        second, label = _sentence(rng, entity, other_relation, world.facts[entity][other_relation.name]), 0
    else:
        other = rng.choice([e for e in world.facts if e != entity and world.facts[e][relation.name] != value])
        second, label = second_template.format(e=entity, v=world.facts[other][relation.name]), 0
    if rng.random() < 0.15:
        # Bare quotes, as in the real MRPC files, which must not be read as CSV quoting.
        second = f'Officials said " {second[:-2]} " .'
    return first, second, label
