-- The format checks on effect keys ('v1:' and 64 lower-case hex digits)
-- said it with a bounded repetition, '^v1:[0-9a-f]{64}$'. PostgreSQL's
-- regular-expression engine builds its matcher's states afresh for every
-- match, and a repetition of 64 makes that ≈ 9 µs per row — paid on every
-- insert into effect, and on every update of it too (a row's CHECK
-- constraints are evaluated again whenever it changes): the executor's
-- PostgreSQL CPU per effect was measurably lower without it
-- (docs/BENCHMARKS.md). The
-- same rule said as a length, and a pattern without the count, costs
-- ≈ 1 µs: exactly 67 bytes, 'v1:', then nothing but 0-9 and a-f (a
-- character outside them, multi-byte or not, fails the pattern; 64 of them
-- are 64 bytes). Same rule, same constraint names, same error (23514).
ALTER TABLE effect
    DROP CONSTRAINT effect_key_check,
    ADD CONSTRAINT effect_key_check CHECK (octet_length(key) = 67 AND key ~ '^v1:[0-9a-f]*$');
ALTER TABLE effect_bump
    DROP CONSTRAINT effect_bump_key_check,
    ADD CONSTRAINT effect_bump_key_check CHECK (octet_length(key) = 67 AND key ~ '^v1:[0-9a-f]*$');
ALTER TABLE target
    DROP CONSTRAINT target_key_check,
    ADD CONSTRAINT target_key_check CHECK (octet_length(key) = 67 AND key ~ '^v1:[0-9a-f]*$');
