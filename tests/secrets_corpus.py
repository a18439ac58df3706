"""A labelled set for the secret gate: real-format credentials and the placeholders of examples.

SECRETS are generated from a fixed seed in each provider's real format (never real keys), set in
the places people paste them: prose, code, shell, .env lines, headers, URLs. PLACEHOLDERS are
the dummies of public docs and coding chats (framework docs, README templates, cloud docs'
example keys, tutorial connection strings): the gate must let every one of them through.
"""

from __future__ import annotations

import random
import string

_rng = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits


def _chars(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _secrets() -> list[str]:
    aws_id = "AKIA" + _chars(UPPER_DIGITS, 16)
    aws_secret = _chars(ALNUM + "/+", 40)
    github = "ghp_" + _chars(ALNUM, 36)
    pat = "github_pat_" + _chars(ALNUM + "_", 60)
    openai = "sk-proj-" + _chars(ALNUM + "_-", 48)
    anthropic = "sk-ant-api03-" + _chars(ALNUM + "_-", 80)
    slack = "xoxb-" + _chars(string.digits, 12) + "-" + _chars(ALNUM, 24)
    google = "AIza" + _chars(ALNUM + "_-", 35)
    stripe = "sk_live_" + _chars(ALNUM, 24)
    gitlab = "glpat-" + _chars(ALNUM + "_-", 20)
    npm = "npm_" + _chars(ALNUM, 36)
    jwt = "eyJ" + _chars(ALNUM, 30) + ".eyJ" + _chars(ALNUM, 40) + "." + _chars(ALNUM + "_-", 43)
    password = _chars(ALNUM, 14) + "7"
    bearer = _chars(ALNUM + "-._~", 32)
    return [
        f"Our AWS key is {aws_id}",
        f"export AWS_ACCESS_KEY_ID={aws_id}",
        f"aws_secret_access_key = {aws_secret}",
        f"AWS_SECRET_ACCESS_KEY=\"{aws_secret}\"",
        f"git clone https://{github}@github.com/acme/app.git",
        f"token: {github}",
        f"GITHUB_TOKEN={pat}",
        f"OPENAI_API_KEY={openai}",
        f"client = Anthropic(api_key=\"{anthropic}\")",
        f"slack bot token {slack}",
        f"maps key {google}",
        f"stripe.api_key = '{stripe}'",
        f"CI uses {gitlab} to push",
        f"//registry.npmjs.org/:_authToken={npm}",
        f"curl -H 'Authorization: Bearer {jwt}' https://api.acme.io",
        f"Authorization: Bearer {bearer}",
        f"authorization=bearer {bearer}",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + _chars(ALNUM, 40),
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA" + _chars(ALNUM, 30),
        "-----BEGIN EC PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF" + _chars(ALNUM, 30),
        f"postgresql://deploy:{password}@db.acme.internal:5432/prod",
        f"HTTPS://deploy:{password}@ci.acme.io/hook",
        f"redis://:{password}@cache.acme.internal:6379/0",
        f"amqp://svc:{password}@mq-1.acme.internal/",
        f"DB_PASSWORD={password}",
        f"password: \"{password}\"",
        f"the admin password = {password}",
        f"client_secret={_chars(ALNUM, 32)}",
        # values that start like code but are credentials (an operator first is no reference)
        f"client_secret=+{_chars(ALNUM, 20)}",
        f"password=*{_chars(ALNUM, 14)}",
        f"api_key=&{_chars(ALNUM, 12)}",
        # whole private key blocks, over several lines, as the tools write them (after the others:
        # the values above keep the seed's order)
        *_key_blocks(),
    ]


BASE64 = ALNUM + "+/"


def _body(lines: int, last: int = 20) -> str:
    return "\n".join([_chars(BASE64, 64) for _ in range(lines)] + [_chars(BASE64, last) + "=="])


def _key_blocks() -> list[str]:
    """RSA as `openssl genrsa -aes128` writes it (encryption headers), OpenSSH as ssh-keygen,
    PGP armour as `gpg --export-secret-keys -a` (a header, a blank line, the checksum), PKCS#8
    inside a service-account JSON file (line breaks escaped as \\n), and an EC key in prose."""
    rsa = ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"
           + _chars("0123456789ABCDEF", 32) + "\n\n" + _body(6) + "\n-----END RSA PRIVATE KEY-----")
    openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + _body(5) + "\n-----END OPENSSH PRIVATE KEY-----\n"
    pgp = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n" + _body(8) + "\n="
           + _chars(BASE64, 4) + "\n-----END PGP PRIVATE KEY BLOCK-----")
    pkcs8 = _body(4).replace("\n", "\\n")
    service_account = ('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
                       + pkcs8 + '\\n-----END PRIVATE KEY-----\\n", "client_email": "ci@acme.iam"}')
    ec = ("The deploy key is\n-----BEGIN EC PRIVATE KEY-----\n" + _body(2)
          + "\n-----END EC PRIVATE KEY-----\nand it lives in Vault.")
    return [rsa, openssh, pgp, service_account, ec]


SECRETS = _secrets()

PLACEHOLDERS = [
    # code that passes a credential along rather than spelling it (seen in LongMemEval's coding chats)
    '"GOOGLE_API_KEY="+credential.ApiKey,',
    "const apiKey = process.env.API_KEY;",
    'database_url = "postgresql://user:password@localhost/mydatabase"',
    "postgresql://postgres:my_password@localhost:5432/my_database",
    'app.config["SQLALCHEMY_DATABASE_URI"] = "postgresql://myuser:mypassword@localhost:5432/mydb"',
    "postgresql://user:secret@localhost",
    'database_url="postgresql://user:password@db.example.com:5432/myapp"',
    'database_url="postgresql://user:pass@host/db?sslmode=verify-full"',
    "postgresql://user:pass@mydb.abc123.us-east-1.rds.amazonaws.com:5432/myapp?sslmode=require",
    "mysql://root:root@127.0.0.1:3306/app",
    "mongodb://admin:admin@localhost:27017",
    "amqp://guest:guest@localhost:5672/",
    "redis://:changeme@localhost:6379",
    "postgres://<user>:<password>@<host>:5432/<db>",
    "postgresql://${DB_USER}:${DB_PASSWORD}@${DB_HOST}/app",
    "docker run -e POSTGRES_PASSWORD=mysecretpassword -d postgres",
    'OPENAI_API_KEY="your-api-key-here"',
    "OPENAI_API_KEY=sk-...",
    "export OPENAI_API_KEY=<your key>",
    "api_key: <API_KEY>",
    "token = 'your-token'",
    'password = "password"',
    "PASSWORD=changeme",
    "DB_PASSWORD=${DB_PASSWORD}",
    "SECRET_KEY = os.environ['SECRET_KEY']",
    'api_key = os.getenv("API_KEY")',
    "password: process.env.DB_PASSWORD",
    "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "Authorization: Bearer <token>",
    "Authorization: Bearer ${TOKEN}",
    'headers = {"Authorization": "Bearer YOUR_ACCESS_TOKEN"}',
    "max_tokens = 100000000",
    "The password is hashed with argon2id before it is stored.",
    "Rotate the API key every 90 days; the secret lives in Vault.",
    "password_hash = bcrypt.hashpw(password, salt)",
    "Use -----BEGIN PUBLIC KEY----- blocks for the verifier.",
    "ssh-keygen writes id_ed25519 and id_ed25519.pub",
]
