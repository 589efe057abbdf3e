"""The app's URLs plus one that fails, for the styled 500 page (tests/web/test_error_pages.py)."""

from django.urls import path

from harness_site.urls import urlpatterns as app_urlpatterns


def fail(request):
    raise RuntimeError("forced failure for the 500 page")


urlpatterns = [path("boom/", fail), *app_urlpatterns]
