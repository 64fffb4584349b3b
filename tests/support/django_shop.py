"""A Django project that is not part of the library, made as a user makes one
(``django-admin startproject``, ``startapp``), with two models joined by a foreign key,
django-redis as its cache and MariaDB through Django's mysql backend (PyMySQL), its views
filling through :mod:`cachesync.contrib.django`. Everything the project reads comes from
its environment (``SHOP_*``, ``CACHE_*``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SETTINGS = '''
# --- the shop's own settings (appended by the test) ---
import os

import pymysql

pymysql.install_as_MySQLdb()          # Django's mysql backend on PyMySQL
INSTALLED_APPS += ["library"]
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
DEBUG = False
DATABASES = {"default": {
    "ENGINE": "django.db.backends.mysql", "NAME": os.environ["SHOP_DB"],
    "HOST": "127.0.0.1", "PORT": os.environ["SHOP_DB_PORT"],
    "USER": os.environ["SHOP_DB_USER"], "PASSWORD": os.environ["SHOP_DB_PASSWORD"],
    "OPTIONS": {"charset": "utf8mb4"}}}
CACHES = {"default": {
    "BACKEND": "django_redis.cache.RedisCache", "LOCATION": os.environ["SHOP_REDIS_URL"],
    "KEY_PREFIX": os.environ["CACHE_KEY_PREFIX"],
    # one variable for the application and cachesync (CACHESYNC_FRAMEWORK_VERSION)
    "VERSION": int(os.environ["CACHE_VERSION"]),
    "TIMEOUT": 300}}
'''

MODELS = '''
from django.db import models


class Author(models.Model):
    name = models.CharField(max_length=100)
    rev = models.IntegerField(default=0)          # grows with every write: judges staleness


class Book(models.Model):
    author = models.ForeignKey(Author, on_delete=models.CASCADE, related_name="books")
    title = models.CharField(max_length=100)
    rev = models.IntegerField(default=0)
'''

VIEWS = '''
from django.http import Http404, JsonResponse

from cachesync.contrib.django import get_or_fill

from .models import Author, Book


def author(request, pk):
    data = get_or_fill(f"author:{pk}", lambda: Author.objects.filter(pk=pk).values(
        "id", "name", "rev").first(), timeout=300)
    if data is None:
        raise Http404
    return JsonResponse(data)


def book(request, pk):
    data = get_or_fill(f"book:{pk}", lambda: Book.objects.filter(pk=pk).values(
        "id", "author_id", "title", "rev").first(), timeout=300)
    if data is None:
        raise Http404
    return JsonResponse(data)


def author_books(request, pk):
    books = get_or_fill(f"author_books:{pk}", lambda: list(Book.objects.filter(
        author_id=pk).order_by("id").values_list("id", "rev")), timeout=300)
    return JsonResponse({"books": books})
'''

URLS = '''
from django.urls import path

from library import views

urlpatterns = [
    path("author/<int:pk>/", views.author),
    path("author/<int:pk>/books/", views.author_books),
    path("book/<int:pk>/", views.book),
]
'''

# ORM writes of four kinds, each bumping the row's rev; one JSON line per commit. Between
# writes, a probe measures commit -> key gone on a row no reader reads (the lag window).
WRITER = '''
import json
import time

from django.core.cache import cache
from django.core.management.base import BaseCommand
from django.db import transaction
from django.db.models import F

from library.models import Author, Book


def out(**fields):
    print(json.dumps(fields), flush=True)


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=float, required=True)
        parser.add_argument("--authors", type=int, nargs="+", required=True)
        parser.add_argument("--books", type=int, nargs="+", required=True)
        parser.add_argument("--probe", type=int, required=True)

    def handle(self, seconds, authors, books, probe, **_):
        deadline, i = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            kind = i % 4
            if kind == 0:                           # Model.save()
                a = Author.objects.get(pk=authors[i % len(authors)])
                a.rev, a.name = a.rev + 1, f"name {i}"
                a.save()
                out(row=f"author:{a.pk}", rev=a.rev, at=time.time())
            elif kind == 1:                         # QuerySet.update()
                pk = authors[(i // 4) % len(authors)]
                with transaction.atomic():
                    rev = Author.objects.select_for_update().get(pk=pk).rev + 1
                    Author.objects.filter(pk=pk).update(rev=F("rev") + 1)
                out(row=f"author:{pk}", rev=rev, at=time.time())
            elif kind == 2:                         # a book moves to another author
                with transaction.atomic():
                    b = Book.objects.select_for_update().get(pk=books[i % len(books)])
                    b.author_id = authors[(authors.index(b.author_id) + 1) % len(authors)] \\
                        if b.author_id in authors else authors[0]
                    b.rev += 1
                    b.save()
                out(row=f"book:{b.pk}", rev=b.rev, at=time.time())
            else:
                self.probe(probe)
            i += 1

    def probe(self, pk):
        key = f"author:{pk}"
        cache.set(key, {"probe": True}, 300)
        Author.objects.filter(pk=pk).update(rev=F("rev") + 1)
        committed = time.time()
        while cache.get(key) is not None:
            if time.time() - committed > 60:
                raise SystemExit("the probe key was never invalidated")
            time.sleep(0.001)
        out(probe_lag=time.time() - committed)
'''


def make_project(root: Path, env: dict) -> Path:
    """``django-admin startproject shopsite`` and ``startapp library`` under ``root``, with
    the shop's settings, models, views, URLs and writer command; migrated. The project
    folder (where manage.py is)."""
    project = root / "shop"
    project.mkdir()
    django_admin = Path(sys.executable).with_name("django-admin")
    run([str(django_admin), "startproject", "shopsite", str(project)], project, env)
    run([sys.executable, "manage.py", "startapp", "library"], project, env)
    with open(project / "shopsite" / "settings.py", "a") as f:
        f.write(SETTINGS)
    (project / "library" / "models.py").write_text(MODELS)
    (project / "library" / "views.py").write_text(VIEWS)
    (project / "shopsite" / "urls.py").write_text(URLS)
    command = project / "library" / "management" / "commands"
    command.mkdir(parents=True)
    for folder in (command.parent, command):
        (folder / "__init__.py").write_text("")
    (command / "write_load.py").write_text(WRITER)
    run([sys.executable, "manage.py", "makemigrations", "library"], project, env)
    run([sys.executable, "manage.py", "migrate", "--noinput"], project, env)
    return project


def run(args: list[str], cwd: Path, env: dict) -> str:
    """Run a project command; raises AssertionError with its output when it fails."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n" \
                                 f"{done.stdout}\n{done.stderr}"
    return done.stdout
