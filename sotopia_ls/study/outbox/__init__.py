"""The outbox: a submitted rating checked and written behind into Label Studio exactly once
(``saving``), and a task's meta written from the gateway, one writer per task at a time
(``marks``). A participant never waits on Label Studio: a submission is settled in the gateway's
database first, and this room carries it across."""
