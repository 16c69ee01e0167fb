"""The IAM evaluator the plan checks rendered policies with: the rules of AWS's policy
evaluation logic, one behaviour per test."""

from __future__ import annotations

from typing import Any

import pytest

from spotproof.policy.aws_iam import Request, UnsupportedPolicy, decide

BUCKET = "arn:aws:s3:::ckpt"


def _policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _allow(action: Any, resource: Any, condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement = {"Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def test_nothing_is_allowed_without_a_statement_that_allows_it() -> None:
    assert decide([_policy()], Request("s3:GetObject", f"{BUCKET}/a")) == "implicitly denied"


def test_an_explicit_deny_wins_over_any_allow() -> None:
    deny = {"Effect": "Deny", "Action": "s3:*", "Resource": "*"}
    policy = _policy(_allow("s3:GetObject", f"{BUCKET}/*"), deny)
    assert decide([policy], Request("s3:GetObject", f"{BUCKET}/a")) == "denied"


def test_statements_of_several_documents_add_up() -> None:
    reads = _policy(_allow("s3:GetObject", f"{BUCKET}/*"))
    writes = _policy(_allow("s3:PutObject", f"{BUCKET}/*"))
    assert decide([reads, writes], Request("s3:PutObject", f"{BUCKET}/a")) == "allowed"


def test_actions_match_case_insensitively_with_wildcards() -> None:
    policy = _policy(_allow("S3:get*", f"{BUCKET}/*"))
    assert decide([policy], Request("s3:GetObject", f"{BUCKET}/a")) == "allowed"
    assert decide([policy], Request("s3:PutObject", f"{BUCKET}/a")) == "implicitly denied"


def test_resources_match_case_sensitively_and_star_spans_slashes() -> None:
    policy = _policy(_allow("s3:GetObject", f"{BUCKET}/checkpoints/*"))
    assert decide([policy], Request("s3:GetObject", f"{BUCKET}/checkpoints/a/b/c")) == "allowed"
    refused = Request("s3:GetObject", f"{BUCKET}/Checkpoints/a")
    assert decide([policy], refused) == "implicitly denied"


def test_brackets_in_a_resource_are_literal_not_a_character_class() -> None:
    policy = _policy(_allow("s3:GetObject", f"{BUCKET}/[ab]"))
    assert decide([policy], Request("s3:GetObject", f"{BUCKET}/a")) == "implicitly denied"
    assert decide([policy], Request("s3:GetObject", f"{BUCKET}/[ab]")) == "allowed"


def test_not_action_allows_everything_but_what_it_names() -> None:
    policy = _policy({"Effect": "Allow", "NotAction": "s3:DeleteObject", "Resource": "*"})
    assert decide([policy], Request("s3:GetObject", f"{BUCKET}/a")) == "allowed"
    assert decide([policy], Request("s3:DeleteObject", f"{BUCKET}/a")) == "implicitly denied"


def test_a_condition_key_holds_if_any_listed_value_matches() -> None:
    listing = _allow("s3:ListBucket", BUCKET, {"StringLike": {"s3:prefix": ["ck", "ck/*"]}})
    deeper = Request("s3:ListBucket", BUCKET, {"s3:prefix": "ck/1/"})
    assert decide([_policy(listing)], deeper) == "allowed"
    allowed = decide([_policy(listing)], Request("s3:ListBucket", BUCKET, {"s3:prefix": "ck/"}))
    refused = decide([_policy(listing)], Request("s3:ListBucket", BUCKET, {"s3:prefix": ""}))
    assert (allowed, refused) == ("allowed", "implicitly denied")


def test_a_key_the_request_lacks_fails_the_condition_unless_if_exists() -> None:
    strict = _allow("s3:ListBucket", BUCKET, {"StringLike": {"s3:prefix": "ck/*"}})
    lenient = _allow("s3:ListBucket", BUCKET, {"StringLikeIfExists": {"s3:prefix": "ck/*"}})
    bare = Request("s3:ListBucket", BUCKET)
    assert decide([_policy(strict)], bare) == "implicitly denied"
    assert decide([_policy(lenient)], bare) == "allowed"


def test_every_operator_and_key_of_a_condition_must_hold() -> None:
    both = _allow(
        "sqs:SendMessage",
        "*",
        {
            "ArnEquals": {"aws:SourceArn": "arn:aws:events:*:1:rule/r"},
            "StringEquals": {"aws:SourceAccount": "1"},
        },
    )
    one = {"aws:SourceArn": "arn:aws:events:us-west-2:1:rule/r"}
    assert decide([_policy(both)], Request("sqs:SendMessage", "q", one)) == "implicitly denied"
    full = {**one, "aws:SourceAccount": "1"}
    assert decide([_policy(both)], Request("sqs:SendMessage", "q", full)) == "allowed"


def test_a_negated_operator_holds_only_if_no_value_matches() -> None:
    deny_outside = {
        "Effect": "Deny",
        "Action": "s3:ListBucket",
        "Resource": BUCKET,
        "Condition": {"StringNotLike": {"s3:prefix": ["ck/*", "shared/*"]}},
    }
    policy = _policy(_allow("s3:ListBucket", BUCKET), deny_outside)
    inside = Request("s3:ListBucket", BUCKET, {"s3:prefix": "shared/x"})
    outside = Request("s3:ListBucket", BUCKET, {"s3:prefix": "other/"})
    assert (decide([policy], inside), decide([policy], outside)) == ("allowed", "denied")


def test_null_tests_whether_the_request_has_the_key() -> None:
    deny_plain = {
        "Effect": "Deny",
        "Action": "*",
        "Resource": "*",
        "Condition": {"Null": {"aws:SourceArn": "true"}},
    }
    policy = _policy(_allow("sqs:SendMessage", "*"), deny_plain)
    assert decide([policy], Request("sqs:SendMessage", "q")) == "denied"
    assert decide([policy], Request("sqs:SendMessage", "q", {"aws:SourceArn": "a"})) == "allowed"


def test_bool_compares_the_words_true_and_false() -> None:
    deny_plain_http = {
        "Effect": "Deny",
        "Action": "s3:*",
        "Resource": "*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
    policy = _policy(_allow("s3:GetObject", "*"), deny_plain_http)
    plain = Request("s3:GetObject", f"{BUCKET}/a", {"aws:SecureTransport": "false"})
    tls = Request("s3:GetObject", f"{BUCKET}/a", {"aws:SecureTransport": "true"})
    assert (decide([policy], plain), decide([policy], tls)) == ("denied", "allowed")


@pytest.mark.parametrize("operator", ["NumericLessThan", "ForAnyValue:NumericLessThan"])
def test_an_operator_it_does_not_model_is_refused_not_guessed(operator: str) -> None:
    policy = _policy(_allow("s3:GetObject", "*", {operator: {"s3:max-keys": "10"}}))
    with pytest.raises(UnsupportedPolicy, match=operator):
        decide([policy], Request("s3:GetObject", "x", {"s3:max-keys": "5"}))


TAGGING = _allow(
    "ec2:CreateTags",
    "*",
    {"ForAllValues:StringEquals": {"aws:TagKeys": ["drill"]}, "Null": {"aws:TagKeys": "false"}},
)


def test_for_all_values_holds_only_if_every_value_of_the_request_is_listed() -> None:
    one = Request("ec2:CreateTags", "i", {"aws:TagKeys": ("drill",)})
    more = Request("ec2:CreateTags", "i", {"aws:TagKeys": ("drill", "owner")})
    assert (decide([_policy(TAGGING)], one), decide([_policy(TAGGING)], more)) == (
        "allowed",
        "implicitly denied",
    )


def test_for_all_values_holds_without_the_key_so_null_must_stand_beside_it() -> None:
    alone = _allow("ec2:DeleteTags", "*", {"ForAllValues:StringEquals": {"aws:TagKeys": "drill"}})
    bare = Request("ec2:DeleteTags", "i")
    assert decide([_policy(alone)], bare) == "allowed"
    assert decide([_policy(TAGGING)], Request("ec2:CreateTags", "i")) == "implicitly denied"


def test_for_any_value_holds_if_one_value_is_listed_and_never_without_the_key() -> None:
    any_drill = _allow(
        "ec2:CreateTags", "*", {"ForAnyValue:StringEquals": {"aws:TagKeys": "drill"}}
    )
    mixed = Request("ec2:CreateTags", "i", {"aws:TagKeys": ("owner", "drill")})
    assert decide([_policy(any_drill)], mixed) == "allowed"
    assert decide([_policy(any_drill)], Request("ec2:CreateTags", "i")) == "implicitly denied"


def test_a_multi_valued_key_under_a_single_valued_operator_is_refused_not_guessed() -> None:
    single = _allow("ec2:CreateTags", "*", {"StringEquals": {"aws:TagKeys": "drill"}})
    with pytest.raises(UnsupportedPolicy, match="multi-valued key aws:TagKeys"):
        decide([_policy(single)], Request("ec2:CreateTags", "i", {"aws:TagKeys": ("drill",)}))


def test_documents_are_read_from_their_json_text_too() -> None:
    text = '{"Statement": {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}}'
    assert decide([text], Request("s3:GetObject", f"{BUCKET}/a")) == "allowed"
