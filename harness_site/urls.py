from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from agent import views

urlpatterns = [
    path("", views.home, name="home"),
    path("c/new/", views.create_conversation, name="create_conversation"),
    path("c/<uuid:conversation_id>/", views.conversation_page, name="conversation"),
    path("c/<uuid:conversation_id>/rename", views.rename_conversation, name="rename"),
    path("c/<uuid:conversation_id>/delete", views.delete_conversation, name="delete"),
    path("c/<uuid:conversation_id>/model", views.set_model, name="set_model"),
    path("files/", views.workspace_files, name="files"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
