"""The list kept tidy and a conversation given its own instructions, in the browser: pin
and archive from an entry's ⋯ menu (the list redrawn in place, the typed prompt kept), the
archived view, and the ⋯ menu's Instructions dialog (saved in the background, a refusal
keeping the text)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import send, sign_in, wait_until_asked


def new_conversations(live, username: str, count: int) -> list[str]:
    """``count`` titled conversations of ``username``'s, the last the newest."""
    code = ("import json\nfrom agent.models import Conversation, User\n"
            f"user = User.objects.get(username='{username}')\n"
            "print(json.dumps([str(Conversation.objects.create(owner=user, model='m', "
            f"title=f'entry {{n}}').id) for n in range({count})]))")  # fmt: skip
    return json.loads(live.manage("shell", "-c", code).strip().splitlines()[-1])


def order(page) -> list[str]:
    return page.eval_on_selector_all("#conv-list .conv-item",
                                     "els => els.map(e => e.dataset.conversationId)")  # fmt: skip


@pytest.fixture(scope="module")
def users(live):
    """Of this file's own: the pins and archives it leaves are no other test's list."""
    live.create_users("pia", "ivo", "noa", "kai", "lea", "oda", "uma", "ari", "eve")
    code = ("from agent.models import User\n"
            "User.objects.create_superuser('sam', password='pw-sam-1234')")  # fmt: skip
    live.manage("shell", "-c", code)


def test_pin_and_archive_redraw_the_list_in_place(new_context, live, users):
    older, newer = new_conversations(live, "pia", 2)
    page = sign_in(new_context(), "pia")
    page.fill("#prompt", "half-typed thought")
    entry = page.locator(f"#conv-list .conv-item[data-conversation-id='{older}']")
    entry.locator("summary").click()
    entry.locator("button.pin-toggle").click()
    page.wait_for_function("id => document.querySelector('#conv-list .conv-item')"
                           ".dataset.conversationId === id", arg=older)  # fmt: skip
    pin = page.locator(f"#conv-list .conv-item[data-conversation-id='{older}'] .conv-pin")
    assert pin.count() and pin.locator("svg").bounding_box()["width"] > 0  # drawn: no emoji font
    assert order(page).index(newer) > 0
    entry = page.locator(f"#conv-list .conv-item[data-conversation-id='{newer}']")
    entry.locator("summary").click()
    entry.locator("button.archive-toggle").click()
    page.wait_for_function(
        "id => !document.querySelector(`#conv-list [data-conversation-id='${id}']`)", arg=newer
    )
    page.click("#archive-view-toggle")
    page.wait_for_selector("#conv-list[data-archived='1']")
    assert order(page) == [newer]
    page.locator("#conv-list .conv-item summary").click()
    page.click("#conv-list button.archive-toggle")  # Unarchive, from the archived view
    page.wait_for_selector("#conv-list .list-empty")
    page.click("#archive-view-toggle")
    page.wait_for_selector("#conv-list[data-archived='0']")
    assert newer in order(page)
    assert page.input_value("#prompt") == "half-typed thought"  # the page never left


def test_instructions_are_edited_in_a_dialog_and_a_refusal_keeps_the_text(new_context, users):
    page = sign_in(new_context(), "ivo")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    page.click(".conv-actions > summary")
    page.click("#instructions-open")
    page.wait_for_selector("#instructions-dialog[open]")  # (its script comes with the menu)
    assert page.evaluate("() => document.activeElement.id") == "instructions"
    # Longer than allowed (the field's maxlength lifted, as a script could): refused, kept.
    page.evaluate("() => document.querySelector('#instructions').removeAttribute('maxlength')")
    page.fill("#instructions", "y" * 4001)
    page.click("#instructions-form button[type=submit]")
    page.wait_for_selector("#instructions-error:text('4000 characters')")
    assert len(page.input_value("#instructions")) == 4001 and page.is_visible(
        "#instructions-dialog"
    )
    page.fill("#instructions", "Answer like a pirate.")
    page.click("#instructions-form button[type=submit]")
    page.wait_for_selector("#instructions-dialog", state="hidden")
    assert page.text_content("#instructions-open").strip() == "Instructions (set)…"
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.input_value("#instructions") == "Answer like a pirate."


def current(page) -> str:
    return page.get_attribute("main", "data-conversation")


def test_new_conversation_never_reopens_an_archived_or_configured_empty_one(new_context, live,
                                                                             users):  # fmt: skip
    page = sign_in(new_context(), "noa")  # the home page made an empty one
    archived = current(page)
    entry = page.locator(f"#conv-list .conv-item[data-conversation-id='{archived}']")
    entry.locator("summary").click()
    entry.locator("button.archive-toggle").click()
    page.wait_for_selector(f"#conv-list [data-conversation-id='{archived}']", state="detached")
    page.click(".new-conv")
    page.wait_for_function("id => document.querySelector('main').dataset.conversation !== id",
                           arg=archived)  # fmt: skip
    page.wait_for_selector("body[data-ws=open]")
    fresh = current(page)  # a new one, in the list and marked as the open one
    assert page.locator(f"#conv-list [data-conversation-id='{fresh}'] .conv-link.current").count()
    page.click(".conv-actions > summary")
    page.click("#instructions-open")
    page.fill("#instructions", "Answer in haiku.")
    page.click("#instructions-form button[type=submit]")
    page.wait_for_selector("#instructions-dialog", state="hidden")
    page.click(".new-conv")  # this one has instructions: not blank
    page.wait_for_function("id => document.querySelector('main').dataset.conversation !== id",
                           arg=fresh)  # fmt: skip
    page.wait_for_selector("body[data-ws=open]")
    assert page.text_content("#instructions-open").strip() == "Instructions…"
    blank = current(page)
    page.click(".new-conv")  # a blank one is still reused rather than piling up
    page.wait_for_selector("body[data-ws=open]")
    assert current(page) == blank


def focused(page) -> str:
    return page.evaluate("() => { const e = document.activeElement; const item ="
                         " e.closest('.conv-item'); return [e.tagName, e.id, item &&"
                         " item.dataset.conversationId].filter(Boolean).join(' '); }")  # fmt: skip


def test_the_focus_stays_in_the_list_when_it_is_redrawn(new_context, live, users):
    """The demanding-user pass: by keyboard, Pin, Archive or Rename redrew the list and the
    focus fell to the page's top (the body): the next Tab started again from the start."""
    older, newer = new_conversations(live, "kai", 2)
    page = sign_in(new_context(), "kai")
    entry = page.locator(f"#conv-list .conv-item[data-conversation-id='{older}']")
    entry.locator("summary").focus()
    page.keyboard.press("Enter")
    entry.locator("button.pin-toggle").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#conv-list .conv-item[data-conversation-id='{older}'][data-pinned]")
    page.wait_for_function("() => document.activeElement !== document.body")
    assert focused(page) == f"SUMMARY {older}"  # its ⋯ again, in the redrawn list
    page.keyboard.press("Enter")
    entry.locator("input[name=title]").focus()
    page.keyboard.press("Control+a")
    page.keyboard.type("Typed title")
    page.keyboard.press("Enter")
    page.wait_for_selector("#conv-list .conv-link:text-is('Typed title')")
    page.wait_for_function("() => document.activeElement !== document.body")
    assert focused(page) == f"SUMMARY {older}"
    page.keyboard.press("Enter")
    entry.locator("button.archive-toggle").focus()
    page.keyboard.press("Enter")  # it leaves the list: the focus goes to the list's first
    page.wait_for_selector(f"#conv-list [data-conversation-id='{older}']", state="detached")
    page.wait_for_function("() => document.activeElement !== document.body")
    assert focused(page).startswith("A conv-link-")


def test_renaming_an_archived_conversation_from_its_page(new_context, live, users):
    """Its ⋯ menu's Rename redraws the list as the page shows it (the archived view or not)
    and the heading; no out-of-band swap for an entry the list does not show."""
    (archived,) = new_conversations(live, "lea", 1)
    page = sign_in(new_context(), "lea")
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    entry = page.locator(f"#conv-list .conv-item[data-conversation-id='{archived}']")
    entry.locator("summary").click()
    entry.locator("button.archive-toggle").click()
    page.wait_for_selector(f"#conv-list [data-conversation-id='{archived}']", state="detached")
    page.click(".conv-actions > summary")
    page.fill(".conv-actions input[name=title]", "Put away, renamed")
    page.click(".conv-actions button:text('Rename')")
    page.wait_for_selector("#conv-title:text-is('Put away, renamed')")
    assert page.get_attribute("#conv-list", "data-archived") == "0"
    page.click("#archive-view-toggle")
    page.wait_for_selector("#conv-list[data-archived='1']")
    page.click(".conv-actions > summary")
    page.fill(".conv-actions input[name=title]", "Renamed in the archived view")
    page.click(".conv-actions button:text('Rename')")
    page.wait_for_selector("#conv-list .conv-link:text-is('Renamed in the archived view')")
    assert page.get_attribute("#conv-list", "data-archived") == "1"  # the view it was in
    assert errors == []


def test_an_open_archived_conversation_is_marked_in_its_header_live(new_context, live, users):
    """The demanding-user pass: an open archived conversation said nothing of it."""
    (mine,) = new_conversations(live, "noa", 1)
    page = sign_in(new_context(), "noa")
    page.goto(f"/c/{mine}/")
    page.wait_for_selector("body[data-ws=open]")
    mark = page.locator("#archived-mark")
    assert mark.is_hidden()
    entry = page.locator(f"#conv-list .conv-item[data-conversation-id='{mine}']")
    entry.locator("summary").click()
    entry.locator("button.archive-toggle").click()  # from the list: the header follows
    mark.wait_for(state="visible")
    assert mark.locator(".archived-label").inner_text() == "Archived"
    assert page.locator("#archive-form button").text_content() == "Unarchive conversation"
    page.reload()
    mark.wait_for(state="visible")
    mark.get_by_role("button", name="Unarchive this conversation").click()  # from the mark
    mark.wait_for(state="hidden")
    page.wait_for_selector(f"#conv-list .conv-item[data-conversation-id='{mine}']")
    page.click(".conv-actions > summary")
    page.click("#archive-form button")  # from the header's ⋯ menu
    mark.wait_for(state="visible")
    entry.wait_for(state="detached")  # (the list's view is the unarchived one)
    assert page.locator("#archive-form button").text_content() == "Unarchive conversation"


def share(live, conversation: str, username: str, role: str) -> None:
    code = ("from agent.models import Membership, User\n"
            f"Membership.objects.create(conversation_id='{conversation}', role='{role}', "
            f"user=User.objects.get(username='{username}'))")  # fmt: skip
    live.manage("shell", "-c", code)


def opened(page, conversation: str):
    page.goto(f"/c/{conversation}/")
    page.wait_for_selector("body[data-ws=open]")
    return page


def test_the_archived_mark_follows_live_on_every_open_page_of_it(new_context, live, users):
    """The demanding-user pass: archived in one tab, the conversation's other tabs and its
    readers' pages said nothing of it until a reload. Each page's mark is drawn for its
    reader (Unarchive only for the owner); the pushed forms carry no CSRF token, the page's
    goes as a header of its HTTP requests, never in what the socket sends."""
    (mine,) = new_conversations(live, "oda", 1)
    share(live, mine, "uma", "viewer")
    first = opened(sign_in(new_context(), "oda"), mine)
    second, sent = first.context.new_page(), []
    second.on("websocket", lambda socket: socket.on("framesent", lambda f: sent.append(f)))
    opened(second, mine)
    reader = opened(sign_in(new_context(), "uma"), mine)
    listed = reader.locator(f"#shared-list .conv-item[data-conversation-id='{mine}']")
    listed.wait_for()
    first.click(".conv-actions > summary")
    first.click("#archive-form button")  # the ⋯ menu
    for page in (first, second, reader):
        page.locator("#archived-mark").wait_for(state="visible")
    listed.wait_for(state="detached")  # out of the reader's "Shared with me" too
    assert second.locator("#archive-form button").text_content() == "Unarchive conversation"
    assert reader.locator("#archived-mark .archived-label").inner_text() == "Archived"
    assert reader.locator("#archived-mark form, #archive-form").count() == 0  # not theirs
    # Unarchive beside the mark, in the tab whose mark came over the socket (no token in it).
    assert second.locator("#archived-mark [name=csrfmiddlewaretoken]").count() == 0
    second.get_by_role("button", name="Unarchive this conversation").click()
    for page in (first, second, reader):
        page.locator("#archived-mark").wait_for(state="hidden")
    listed.wait_for()
    assert first.locator("#archive-form button").text_content() == "Archive conversation"
    second.wait_for_selector(f"#conv-list .conv-item[data-conversation-id='{mine}']")
    # A form sent on the socket by the transport, next to the page's own frames.
    second.click(".conv-actions > summary")
    second.click(".compact-form button")
    second.get_by_text("Nothing to compact").wait_for()
    token = second.locator("main.chat").get_attribute("data-csrf")
    assert token and any('"compact"' in str(frame) for frame in sent)
    assert not [frame for frame in sent if token in str(frame) or "CSRF" in str(frame)]


def test_the_owners_other_tabs_lists_follow_and_wait_while_in_use(new_context, live, users):
    """The tour: archived or pinned in one tab, the conversation stayed as it was in the
    owner's other tabs' lists until a reload. They follow now; a list in use (its ⋯ menu
    open, a rename half typed) is redrawn only once it is left, the text kept till then."""
    kept, moved, other = new_conversations(live, "ari", 3)
    first = opened(sign_in(new_context(), "ari"), other)
    second = opened(first.context.new_page(), other)
    entry = f"#conv-list .conv-item[data-conversation-id='{moved}']"
    first.locator(entry).locator("summary").click()
    first.locator(entry).locator("button.pin-toggle").click()
    second.wait_for_function("id => document.querySelector('#conv-list .conv-item')"
                             ".dataset.conversationId === id", arg=moved)  # fmt: skip
    # In use in the second tab: the rename of the entry being archived, half typed.
    second.locator(f"{entry} summary").click()
    second.locator(f"{entry} .conv-rename input[name=title]").fill("half a new na")
    second.eval_on_selector("#conv-list-refresh", "el => { el.dataset.seen = '1'; }")
    first.locator(entry).locator("summary").click()
    first.locator(entry).locator("button.archive-toggle").click()
    first.locator(entry).wait_for(state="detached")
    # The notice came (a new element to fetch the list), and waits.
    second.wait_for_selector("#conv-list-refresh:not([data-seen])", state="attached")
    typed = second.locator(f"{entry} .conv-rename input[name=title]")
    assert typed.input_value() == "half a new na"
    second.keyboard.press("Escape")  # the menu closes, the list is left
    second.locator("#prompt").focus()
    second.locator(entry).wait_for(state="detached")
    listed = order(second)
    assert moved not in listed and listed.index(other) < listed.index(kept)


def test_a_refresh_answered_after_a_menu_opened_waits_until_it_is_left(new_context, live, users):
    """Found in a loaded CI run: the list's refresh was on its way when the user opened an
    entry's ⋯ menu; its answer replaced the list, and the menu with it, under the user's
    click. An answer that finds the list in use waits as a refresh asked for then does."""
    kept, moved, other = new_conversations(live, "eve", 3)
    first = opened(sign_in(new_context(), "eve"), other)
    second = opened(first.context.new_page(), other)
    held = []
    second.route("**/c/*/list*", lambda route: held.append(route))
    entry = f"#conv-list .conv-item[data-conversation-id='{moved}']"
    first.locator(entry).locator("summary").click()
    first.locator(entry).locator("button.pin-toggle").click()
    wait_until_asked(second, held, "the second tab's list")  # its refresh, on its way
    second.locator(f"#conv-list .conv-item[data-conversation-id='{kept}'] summary").click()
    held[0].continue_()
    second.unroute("**/c/*/list*")
    second.wait_for_timeout(300)  # (the answer has come: it is not drawn)
    menu = second.locator(f"#conv-list .conv-item[data-conversation-id='{kept}'] details")
    assert menu.evaluate("d => d.open")
    assert order(second)[0] != moved
    second.keyboard.press("Escape")  # left: the list is fetched again and drawn
    second.locator("#prompt").focus()
    second.wait_for_function("id => document.querySelector('#conv-list .conv-item')"
                             ".dataset.conversationId === id", arg=moved)  # fmt: skip


def test_a_refresh_answered_while_the_archived_view_loads_does_not_lose_it(
    new_context, live, users
):
    """Found in a loaded CI run: a rename's notice made the page fetch its list; the user
    opened the archived view meanwhile, and the fetch's answer, coming first, swapped the
    list from under the view's request, whose answer then went nowhere. The fetch waits for
    the page's own answer (and for the list to be left), then runs again in the view the
    page shows."""
    (mine,) = new_conversations(live, "eve", 1)
    page = opened(sign_in(new_context(), "eve"), mine)
    held = {}  # the refresh's first fetch and the archived view's, held back

    def hold(route) -> None:
        kind = "view" if "view=" in route.request.url else "archived"
        if kind in held:
            route.continue_()
        else:
            held[kind] = route

    page.route("**/list?*", hold)
    with page.expect_request(lambda request: "/list?view=" in request.url):
        page.click(".conv-actions > summary")
        page.fill(".conv-actions input[name=title]", "Renamed, then the view changed")
        page.click(".conv-actions button:text('Rename')")
    with page.expect_request(lambda request: "/list?archived=1" in request.url):
        page.click("#archive-view-toggle")
    with page.expect_response(lambda response: "/list?view=" in response.url):
        held["view"].continue_()  # the refresh answers first
    held["archived"].continue_()  # then the view's
    page.wait_for_selector("#conv-list[data-archived='1']")
    # The refresh runs again in the view shown, once the list (where the focus is) is left.
    with page.expect_response(lambda response: "/list?view=archived" in response.url):
        page.locator("#prompt").focus()
    page.wait_for_function("() => !document.querySelector('#conv-list-refresh.requesting')")
    assert page.get_attribute("#conv-list", "data-archived") == "1"


def test_a_conversation_deleted_in_another_tab(new_context, live, users):
    """The tour: its open page stacked two notices saying the same (the banner, and the
    server's refusal beside the composer); the owner's other pages kept it in their lists."""
    gone, other = new_conversations(live, "ari", 2)
    first = opened(sign_in(new_context(), "ari"), other)
    second = opened(first.context.new_page(), gone)
    third = opened(first.context.new_page(), other)
    first.on("dialog", lambda dialog: dialog.accept())
    entry = f"#conv-list .conv-item[data-conversation-id='{gone}']"
    first.locator(entry).locator("summary").click()
    first.locator(entry).locator(".conv-delete button").click()
    second.wait_for_selector("#conversation-gone", state="visible")
    third.locator(entry).wait_for(state="detached")
    assert second.is_hidden("#composer-alert")
    shown = second.eval_on_selector_all(
        "[role=alert]", "els => els.filter(e => e.checkVisibility()).map(e => e.id)"
    )
    assert shown == ["conversation-gone"]


def test_the_admins_edits_reach_the_readers_open_pages(new_context, live, users):
    """Staff archiving or deleting a shared conversation in the admin: its reader's mark and
    "Shared with me" follow, as when its owner does it on the page."""
    shown, other = new_conversations(live, "oda", 2)
    share(live, shown, "uma", "viewer")
    share(live, other, "uma", "collaborator")
    reader = opened(sign_in(new_context(), "uma"), shown)

    def entry(conversation):
        return reader.locator(f"#shared-list .conv-item[data-conversation-id='{conversation}']")

    entry(other).wait_for()
    staff = sign_in(new_context(), "sam")
    staff.goto(f"/admin/agent/conversation/{shown}/change/")
    staff.fill("#id_title", "Renamed by staff")
    staff.click("input[name=_save]")
    # The reader's heading, tab title and list follow.
    reader.wait_for_selector("#conv-title:text-is('Renamed by staff')")
    assert reader.title() == "Renamed by staff · Harness"
    entry(shown).filter(has_text="Renamed by staff").wait_for()
    staff.goto(f"/admin/agent/conversation/{shown}/change/")
    staff.check("#id_archived")
    staff.click("input[name=_save]")
    reader.locator("#archived-mark").wait_for(state="visible")
    entry(shown).wait_for(state="detached")
    staff.goto(f"/admin/agent/conversation/{other}/delete/")
    staff.click("#content form input[type=submit]")  # "Yes, I'm sure"
    entry(other).wait_for(state="detached")


def test_the_title_field_follows_the_name_the_first_prompt_gives(new_context, users, fresh_model):
    page = sign_in(new_context(), "uma")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "name me please")
    page.wait_for_selector("#conv-title:text-is('name me please')")
    page.click(".conv-actions > summary")
    assert page.input_value(".conv-actions input[name=title]") == "name me please"
