"""The commands on lessons (bot/memory.py): keep, remember, forget and list them.

They act on the repository's lessons from any of its issues. The files a lesson cites are
read from the default branch before the transaction (bot/handlers/comments.py, gather).
"""

from __future__ import annotations

from sqlalchemy import select

from bot import memory
from bot.commands import Command
from bot.handlers.request import Request
from bot.models import Lesson, LessonState
from bot.plans import latest_plan
from bot.render import lessons_reply


def cited_paths(command: Command, lesson: Lesson | None) -> list[str]:
    """The files a /keep or /remember needs read from the default branch."""
    if command.name == "remember":
        return [c.path for c in memory.citations_in(command.args["lesson"])]
    named, _ = memory.cited_and_scoped(command.args.get("cite", ""))
    own = memory.citations_of(lesson) if lesson is not None else []
    return list(dict.fromkeys(c.path for c in [*own, *named]))


def keep_lesson(request: Request, command: Command) -> str | None:
    """Keep a proposed lesson, or keep one again (expired, or set aside because its lines
    changed), pinned to its cited lines as they read now."""
    session = request.ctx.session
    lesson = memory.lesson_in(session, request.repository_id, command.args["lesson"])
    if lesson is None:
        return _unknown(command)
    if lesson.state == LessonState.FORGOTTEN:
        return (
            f"L{lesson.id} was forgotten by @{lesson.decided_by}. If it still holds, "
            "say it again with `/remember <lesson>`."
        )
    if lesson.state == LessonState.HEARD:
        return f"L{lesson.id} comes from a plan still under way; it is proposed when the plan ends."
    named, scope = memory.cited_and_scoped(command.args.get("cite", ""))
    pinned, dropped = _pin(request, memory.citations_of(lesson), named)
    if isinstance(pinned, str):
        return f"L{lesson.id} cannot be kept: {pinned}"
    memory.keep(lesson, request.actor, pinned, scope)
    request.answer(_kept(lesson, dropped))
    return None


def remember_lesson(request: Request, command: Command) -> str | None:
    """Keep a writer's own lesson at once."""
    session = request.ctx.session
    text = command.args["lesson"]
    pinned, dropped = _pin(request, memory.citations_in(text), [])
    if isinstance(pinned, str):
        return pinned
    plan = latest_plan(session, request.repository_id, request.issue_number)
    lesson = Lesson(
        repository_id=request.repository_id,
        state=LessonState.PROPOSED,
        text=memory.shorten(" ".join(text.split())),
        origin=f"comment:{request.comment_id}",
        kind="remember",
        author=request.actor,
        source_url=request.comment_url,
        issue_number=request.issue_number,
        plan_id=plan.id if plan else None,
        citations=[],
    )
    session.add(lesson)
    memory.keep(lesson, request.actor, pinned)
    session.flush()
    request.answer(_kept(lesson, dropped))
    return None


def forget_lesson(request: Request, command: Command) -> str | None:
    """Forget a lesson: no later plan reads it."""
    lesson = memory.lesson_in(request.ctx.session, request.repository_id, command.args["lesson"])
    if lesson is None:
        return _unknown(command)
    if lesson.state == LessonState.FORGOTTEN:
        return f"L{lesson.id} was already forgotten by @{lesson.decided_by}."
    memory.forget(lesson, request.actor)
    request.answer(f"Forgot L{lesson.id}: later plans will not read it.")
    return None


def list_lessons(request: Request, command: Command) -> str | None:
    """List the repository's lessons kept and waiting for a writer."""
    memory.expire(request.ctx.session, request.repository_id)
    lessons = request.ctx.session.scalars(
        select(Lesson)
        .where(
            Lesson.repository_id == request.repository_id,
            Lesson.state.in_((LessonState.KEPT, LessonState.PROPOSED)),
        )
        .order_by(Lesson.id)
    ).all()
    request.answer(lessons_reply(lessons))
    return None


def _pin(
    request: Request, found: list[memory.Citation], named: list[memory.Citation]
) -> tuple[list[dict[str, object]] | str, list[str]]:
    """Pin the citations to the default branch now. Lines the writer named must be there;
    ones read from the lesson's words that are not are left out, and said so."""
    files = request.ctx.facts.files
    if files is None:
        raise RuntimeError("the cited files were not read before the transaction")
    problem = memory.pin(named, files)
    if isinstance(problem, str):
        return problem, []
    kept = [c for c in found if not isinstance(memory.pin([c], files), str)]
    dropped = [c.label for c in found if c not in kept]
    pinned = memory.pin(list(dict.fromkeys([*kept, *named])), files)
    return pinned, dropped


def _kept(lesson: Lesson, dropped: list[str]) -> str:
    cites = [
        memory.Citation(c["path"], c.get("start"), c.get("end")).label for c in lesson.citations
    ]
    said = [f"Kept L{lesson.id}: later plans that concern it will read it."]
    if cites:
        said.append(
            "It is about " + ", ".join(f"`{c}`" for c in cites) + "; once those lines change "
            "it is set aside until someone keeps it again."
        )
    else:
        said.append(
            f"It cites no lines (`/keep L{lesson.id} path:12-20` ties it to some), so nothing "
            "can show it stale."
        )
    if lesson.scope:
        globs = ", ".join(f"`{glob}`" for glob in lesson.scope)
        said.append(f"Issues naming a path in {globs} are given it.")
    if dropped:
        missing = ", ".join(f"`{each}`" for each in dropped)
        said.append(f"Not cited, as the default branch has no such lines: {missing}.")
    said.append(
        f"It expires in 28 days unless a plan that used it merges; `/forget L{lesson.id}` drops it."
    )
    return " ".join(said)


def _unknown(command: Command) -> str:
    return f"This repository has no lesson {command.args['lesson']}; `/lessons` lists them."
