"""Best-of-N: one approved plan carried out by N candidates side by side, and the one a
reviewer picks.

`/approve rN x3` (or `candidates:` in the repo config, a count or a list of agents) queues
one execute job per candidate. Each works in its own worktree and branch
(`<plan branch>-c<N>`), within its share of what was left of the plan's budget, and is
verified like any plan: its checks run and post check runs on its own head. The plan stays
`executing` until every candidate has ended, then waits in review with them ranked on its
status comment. `/approve-diff <sha>` picks the candidate with that head: its branch
becomes the plan's and opens the pull request; once it is open, the others are dropped and
their branches and worktrees cleaned up.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_DOWN, Decimal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from bot.costs import plan_jobs
from bot.db import rows_changed
from bot.models import Candidate, CandidateState, Plan
from bot.repo_config import RepoConfig

# Candidates still in the running: not dropped when another was chosen or the plan began again.
LIVE = (
    CandidateState.QUEUED,
    CandidateState.RUNNING,
    CandidateState.VERIFIED,
    CandidateState.FAILED,
    CandidateState.CHOSEN,
)
ENDED = (CandidateState.VERIFIED, CandidateState.FAILED)


def candidate_agents(config: RepoConfig, asked: str | None) -> list[str | None]:
    """Each candidate's agent (None: the plan's own) for an approval: `xN` when given, else
    the repo config's `candidates`; an empty list runs the plan once, without candidates."""
    if asked is None:
        return list(config.candidates)
    count = int(asked)
    if count == 1:
        return []
    pool = config.candidates or (None,)
    return [pool[index % len(pool)] for index in range(count)]


def shares(budget_left: Decimal | None, count: int) -> Decimal | None:
    """Each candidate's share of what is left of the plan's budget, rounded down to a
    hundredth of a cent so the shares never add up to more than the budget."""
    if budget_left is None:
        return None
    left = max(budget_left, Decimal(0))
    return (left / count).quantize(Decimal("0.0001"), rounding=ROUND_DOWN)


def live_candidates(session: Session, plan_id: int) -> list[Candidate]:
    """The plan's candidates not dropped, in number order."""
    return list(
        session.scalars(
            select(Candidate)
            .where(Candidate.plan_id == plan_id, Candidate.state.in_(LIVE))
            .order_by(Candidate.number)
        )
    )


def start_candidates(
    session: Session, plan: Plan, agents: Sequence[str | None], budget: Decimal | None
) -> list[Candidate]:
    """Drop what an earlier approval ran and add this approval's candidates, sharing the
    plan's budget between them."""
    earlier = session.scalars(select(Candidate).where(Candidate.plan_id == plan.id)).all()
    for old in earlier:
        old.state = CandidateState.DROPPED
    first = max((old.number for old in earlier), default=0) + 1
    added = [
        Candidate(
            plan_id=plan.id,
            number=first + index,
            agent=agent or plan.agent,
            model=plan.model if agent is None else None,
        )
        for index, agent in enumerate(agents)
    ]
    session.add_all(added)
    session.flush()
    reshare(session, plan, budget)
    return added


def reshare(session: Session, plan: Plan, budget: Decimal | None) -> None:
    """Split what the plan's budget leaves after the work before its candidates (planning)
    equally between its candidates, up front: at approval, and again when `/budget` sets a
    new one."""
    candidates = live_candidates(session, plan.id)
    if not candidates:
        return
    before = sum(
        (j.cost_usd for j in plan_jobs(session, plan.id) if j.candidate is None), Decimal(0)
    )
    share = shares(None if budget is None else budget - before, len(candidates))
    for each in candidates:
        each.budget_usd = share


def rank_key(candidate: Candidate) -> tuple[int, int, int, int, Decimal, float]:
    """Best first: green before red before no head at all, more checks passed, fewer files
    outside the plan's scope, the smaller diff, the cheaper, then the sooner done."""
    green = candidate.checks_total > 0 and candidate.checks_passed == candidate.checks_total
    standing = 0 if candidate.head_sha and green else 1 if candidate.head_sha else 2
    return (
        standing,
        -candidate.checks_passed,
        candidate.outside_scope,
        candidate.lines_changed,
        candidate.cost_usd,
        candidate.seconds,
    )


def ranked(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates best first (rank_key), ties by number."""
    return sorted(candidates, key=lambda each: (rank_key(each), each.number))


def unpicked(session: Session, plan: Plan) -> list[Candidate]:
    """The plan's candidates while none has been chosen (empty otherwise)."""
    found = live_candidates(session, plan.id)
    if any(each.state == CandidateState.CHOSEN for each in found):
        return []
    return found


def candidate_with_head(candidates: Sequence[Candidate], sha: str | None) -> Candidate | str:
    """The candidate whose head starts with sha, or why none can be picked."""
    heads = {each.head_sha: each for each in candidates if each.head_sha}
    listed = ", ".join(f"`{head[:12]}` (c{each.number})" for head, each in heads.items())
    if not heads:
        return "None of this plan's candidates has a head to approve."
    if not sha:
        return (
            f"This plan ran {len(candidates)} candidates; approve one by its head, for example "
            f"`/approve-diff {next(iter(heads))[:12]}`. Their heads: {listed}."
        )
    found = [each for head, each in heads.items() if head.startswith(sha)]
    if len(found) != 1:
        return f"`{sha}` is not the head of one candidate. Their heads: {listed}."
    return found[0]


def pick(session: Session, plan: Plan, chosen: Candidate) -> bool:
    """Make the chosen candidate's branch and head the plan's, unless the plan moved since
    it was read; the others are dropped once its pull request is open (`settle_pick`)."""
    picked = update(Plan).where(Plan.id == plan.id, Plan.version == plan.version)
    values = {"branch": chosen.branch, "head_sha": chosen.head_sha, "version": plan.version + 1}
    if rows_changed(session, picked.values(**values)) != 1:
        return False
    session.refresh(plan)
    return True


def settle_pick(session: Session, plan: Plan) -> None:
    """The plan's pull request is open from a candidate's head: that one is chosen, the
    others dropped (their branches and worktrees are then cleaned up)."""
    for each in live_candidates(session, plan.id):
        chosen = each.head_sha == plan.head_sha and each.branch == plan.branch
        each.state = CandidateState.CHOSEN if chosen else CandidateState.DROPPED
